// tools/train/train.cpp — `tandem train`: the whole run, readable top to bottom. Load the data,
// build the model, optimizer and schedule, maybe resume from a checkpoint, then per epoch: train,
// evaluate, log, checkpoint, rewrite the report. The pieces live beside this file: models.h (the
// models), step.h (one step in every mode), epoch.h (the loops), checkpointing.h, metrics.h,
// report.h, config.h.
#include <tandem/core/check.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/generator.h>
#include <tandem/core/thread_pool.h>
#include <tandem/data/distributed_sampler.h>
#include <tandem/data/mnist.h>
#include <tandem/parallel/comm/broadcast_object.h>
#include <tandem/parallel/process_group.h>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iomanip>
#include <nlohmann/json.hpp>

#include "../commands.h"
#include "checkpointing.h"
#include "config.h"
#include "data_source.h"
#include "epoch.h"
#include "models.h"
#include "optim_setup.h"
#include "pipeline_report.h"
#include "progress.h"
#include "report.h"

namespace tandem::tools {
namespace fs = std::filesystem;
namespace {

std::string local_time(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

// A field of a checkpoint's config JSON, or `fallback` when it is absent or of another type.
template <typename T>
T saved_field(const std::string& config_json, const char* key, T fallback) {
  const nlohmann::json j = nlohmann::json::parse(config_json, nullptr, false);
  try {
    return j.is_object() && j.contains(key) ? j[key].get<T>() : fallback;
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

std::string percent(double fraction) {
  return str(std::fixed, std::setprecision(2), 100 * fraction, "%");
}

void check_device(Device device) {
  if (!device.is_cuda()) return;
  const int n = cuda::device_count();
  TD_CHECK_DEVICE(device.index() < n, "train: --device ", device, ", but ",
                  n == 0 ? std::string(TANDEM_HAS_CUDA ? "no CUDA device is visible"
                                                       : "this build of Tandem has no CUDA")
                         : str("only ", n, " CUDA device(s) are visible"),
                  "\n  hint: `tandem devices` lists what this machine has");
}

}  // namespace

int run_train(const TrainOptions& flags) {
  if (flags.model == "gpt") return run_train_gpt(flags);
  const auto start = std::chrono::steady_clock::now();
  const std::string started = local_time("%Y-%m-%d %H:%M:%S");
  TrainOptions o = resolve_config(flags);
  // How the run uses its devices, decided once: one device, --ddp (this process is one rank),
  // --data-parallel (one process, a replica per device per step) or --pipeline (the model cut
  // into one stage per device).
  Placement placement = resolve_placement(o);
  if (dry_run()) return dry_run_done("train");
  std::shared_ptr<parallel::Communicator> group;
  if (placement.mode == Parallelism::DDP) group = join_ddp_group(placement, o);
  const Device device = placement.device;
  const int rank = group ? group->rank() : 0, world = group ? group->size() : 1;
  const bool lead = rank == 0;  // rank 0 logs, evaluates, checkpoints and reports
  // --tp: a (dp, tp) mesh; the ranks of a tp group share their batch rows.
  const std::shared_ptr<parallel::DeviceMesh> mesh = o.tp > 1 ? make_mesh(group, o) : nullptr;
  const int replicas = mesh ? mesh->size("dp") : world,
            replica = mesh ? mesh->coordinate("dp") : rank;
  check_device(device);
  for (const Device& d : placement.devices) check_device(d);
  // The checkpoint directory is checked before any work, not at the first save (rank 0 writes a
  // whole file; with --sharded-checkpoint every rank its shards).
  if (!o.checkpoint.empty() && (lead || o.sharded_checkpoint))
    check_checkpoint_writable(o.checkpoint);

  // ---- data: each split is loaded and normalised once; batches are then row gathers.
  const DataSource source = resolve_data_source(o.dataset);
  const data::MnistOptions norm{.normalize = true, .mean = source.mean, .std = source.std};
  const data::MNIST train_set(source.dir, data::Split::Train, norm);
  const data::MNIST eval_set(source.dir, data::Split::Test, norm);
  const int64_t rows = train_set.images().size(2), cols = train_set.images().size(3);
  // drop_last: a last batch of one image would break batch norm's training statistics.
  // With --ddp every rank takes its share of each epoch's permutation (DistributedSampler).
  auto sampler = o.ddp ? std::make_shared<data::DistributedSampler>(
                             train_set.size(),
                             data::DistributedSamplerOptions{
                                 .num_replicas = replicas, .rank = replica, .seed = o.seed})
                       : nullptr;
  data::DataLoader loader(train_set,
                          {.batch_size = o.batch_size / replicas,
                           .shuffle = !o.ddp,
                           .seed = o.seed,
                           .drop_last = true,
                           .num_workers = o.workers,
                           .pin_memory = device.is_cuda()},  // page-locked: faster uploads
                          sampler);
  data::DataLoader eval_loader(eval_set, {.batch_size = 500});
  const int64_t steps = o.max_steps > 0 ? std::min(o.max_steps, loader.size()) : loader.size();
  TD_CHECK_VALUE(steps > 0, "train: ", source.dir, " has ", train_set.size(),
                 " training images, fewer than one batch (--batch-size ", o.batch_size, ")");

  // ---- model, optimizer, schedule. The seed fixes the initial weights and dropout's masks.
  manual_seed(o.seed);
  auto model =
      std::make_shared<nn::Sequential>(make_model(o.model, rows, cols, o.activation_checkpointing));
  // --tp: each rank keeps its slices of the whole model every rank built (the same seed).
  auto placements = std::make_shared<parallel::PlacementTable>();
  if (mesh)
    model = std::make_shared<nn::Sequential>(parallel::tp::parallelize(
        *model, mesh->group("tp"), tensor_parallel_plan(o.model), {.placements = placements}));
  // Placed and wrapped for its mode before the optimizer, which holds the placed parameters.
  Setup setup = make_setup(model, placement, o, mesh, placements);
  std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(o, model->parameters(), setup);
  std::unique_ptr<optim::LRScheduler> scheduler = make_scheduler(o, *optimizer, steps);

  // ---- resume: weights, optimizer state, step count and dropout's generator, as they were.
  int64_t first_epoch = 1, global_step = 0;
  std::string resumed, resumed_scaler;
  if (o.resume) {
    const TrainState state = load_checkpoint(o.checkpoint, restore_into(setup, *optimizer));
    resumed_scaler = state.grad_scaler_json;
    default_generator(device).set_state(state.generator);
    first_epoch = state.epoch + 1;
    global_step = state.global_step;
    if (o.log_dir.empty()) o.log_dir = saved_field<std::string>(state.config_json, "log_dir", "");
    resumed = str(o.checkpoint, " after epoch ", state.epoch, " (step ", global_step, ")");
    if (lead)
      std::printf("resuming from %s: continuing at epoch %lld of %d\n", resumed.c_str(),
                  (long long)first_epoch, o.epochs);
    for (const std::string& d : config_differences(state.config_json, o))
      if (lead) std::printf("  note: changed since the checkpoint: %s\n", d.c_str());
    const int saved_epochs = saved_field<int>(state.config_json, "epochs", o.epochs);
    if (lead && saved_epochs != o.epochs && o.schedule != "none" && o.schedule != "step")
      std::printf(
          "  note: the %s schedule now spans %d epochs instead of %d: the lr from here on "
          "matches neither an uninterrupted %d- nor %d-epoch run\n",
          o.schedule.c_str(), o.epochs, saved_epochs, o.epochs, saved_epochs);
    TD_CHECK_VALUE(state.epoch <= o.epochs, "train: --resume: ", o.checkpoint, " is after epoch ",
                   state.epoch, ", past --epochs ", o.epochs,
                   "; a run cannot train backwards\n  hint: give --epochs ", state.epoch,
                   " or more (or start afresh without --resume)");
    if (first_epoch > o.epochs) {
      if (lead)
        std::printf("the checkpoint has finished all %d epochs; raise --epochs to train more\n",
                    o.epochs);
      return 0;
    }
  }
  // ---- --amp: autocast in the forward; for fp16 a gradient scaler (bfloat16 has float32's range
  // and needs none). Under --ddp the ranks sum their found-inf flags, so all skip together.
  const DType amp = o.amp == "bf16" ? kBFloat16 : o.amp == "fp16" ? kFloat16 : kFloat32;
  setup.amp = amp;
  const std::unique_ptr<optim::GradScaler> scaler_owner =
      make_grad_scaler(amp, group.get(), device);
  optim::GradScaler& scaler = *scaler_owner;
  if (o.resume && amp == kFloat16 && !resumed_scaler.empty())
    scaler.load_state_dict(optim::grad_scaler_state_from_json(resumed_scaler));
  setup.scaler = &scaler;
  if (scheduler) scheduler->set_step(global_step);  // this step's lr (warm-up starts low)

  // ---- logging: metrics.jsonl (a resumed run drops what ran after its checkpoint), report.
  if (o.log_dir.empty())
    o.log_dir = str("runs/", o.model, "-", source.name, "-", local_time("%Y%m%d-%H%M%S"));
  if (o.ddp) {  // one run, one directory: rank 0's name for it
    o.log_dir = parallel::broadcast_string(*group, o.log_dir);
  }
  fs::create_directories(o.log_dir);
  const std::string metrics_file = lead ? "metrics.jsonl" : str("metrics-rank", rank, ".jsonl");
  MetricsLog metrics((fs::path(o.log_dir) / metrics_file).string(),
                     o.resume ? first_epoch - 1 : -1);
  const std::string report_path = (fs::path(o.log_dir) / "report.html").string();
  const std::string config = config_json(o), eval = source.eval_name;
  const std::string noun = source.npm_subset ? "digits" : "images";
  const std::string params = with_commas(  // the whole model's, when ranks hold shards
      setup.fsdp ? setup.fsdp->whole_parameter_count() : model->parameter_count());
  const std::string data_line = str(source.dir, ": ", with_commas(train_set.size()), " train / ",
                                    with_commas(eval_set.size()), " ", eval, " ", noun);

  const std::string parallel_line = describe_parallelism(setup, o, group.get());
  if (lead)
    std::printf("tandem train: %s (%s parameters) on %s, device %s%s\n", o.model.c_str(),
                params.c_str(), data_line.c_str(), device.str().c_str(), parallel_line.c_str());
  if (lead)
    std::printf(
        "%d epoch%s x %lld steps (batch %lld), %s lr %g, schedule %s, augment %d px, seed "
        "%llu; logs in %s\n",
        o.epochs, o.epochs == 1 ? "" : "s", (long long)steps, (long long)o.batch_size,
        o.optimizer.c_str(), *o.lr, o.schedule.c_str(), *o.augment, (unsigned long long)o.seed,
        o.log_dir.c_str());
  std::fflush(stdout);

  // The image models' schedule counts the steps taken (a checkpoint's global step): a skipped
  // step does not advance it.
  Updater update{.setup = setup,
                 .optimizer = *optimizer,
                 .scheduler = scheduler.get(),
                 .policy = {.skip_nonfinite = o.skip_nonfinite,
                            .skipped_steps_advance_schedule = false,
                            .world = group.get(),
                            .kept = "a --checkpoint holds the last finished epoch",
                            .quiet = !lead}};
  EpochSetup epochs{.step = setup,
                    .update = update,
                    .loader = loader,
                    .steps = steps,
                    .augment = *o.augment,
                    .fill = float((0 - source.mean) / source.std),  // a black pixel, normalised
                    .seed = o.seed,
                    .interactive = progress_is_interactive(o.no_progress),
                    .metrics = metrics,
                    .quiet = !lead,
                    .world = replicas};
  // --cuda-graphs: the step the epoch loop would run, optimizer included, as one graph.
  std::unique_ptr<GraphedStep> graphed;
  if (o.cuda_graphs) {
    graphed = std::make_unique<GraphedStep>(device, [&](const Tensor& x, const Tensor& y) {
      optimizer->zero_grad();
      const StepResult r = train_step(setup, x, y);
      step_optimizer(setup, *optimizer);
      return std::pair{r.loss, r.logits};
    });
    epochs.graphed = graphed.get();
  }
  std::string memory;  // --ddp: this rank's memory after the first step, beside the formula
  if (o.ddp)
    epochs.after_first_step = [&] {
      memory = memory_line(setup, o, replicas);
      if (lead)
        std::printf("memory per rank (rank 0, %s): %s\n", device.str().c_str(), memory.c_str());
    };
  ReportInfo report{.title = str(o.model, " on ", source.name),
                    .run = {},
                    .config = config_rows(o),
                    .eval_name = eval,
                    .headline = ""};
  std::string final_line;
  for (int64_t epoch = first_epoch; epoch <= o.epochs; ++epoch) {
    const PassResult t = train_epoch(epochs, epoch, global_step);
    CheckpointContent content;  // every rank: --zero's shards are gathered (rank 0 keeps them)
    const bool whole_file = !o.checkpoint.empty() && !o.sharded_checkpoint;
    if (whole_file) content = checkpoint_content(setup, *optimizer);
    PassResult e;
    if (lead || everyone_evaluates(setup)) e = evaluate(setup, eval_loader);
    // What a checkpoint of this epoch records beside the tensors.
    const auto state_now = [&] {
      return TrainState{epoch, global_step, default_generator(device).get_state(), config,
                        scaler.is_enabled() ? optim::to_json(scaler.state_dict()) : ""};
    };
    check_evaluation_finite(e.loss, group.get(), str("after epoch ", epoch), o.checkpoint);
    if (o.sharded_checkpoint)  // every rank writes its shards
      save_sharded_checkpoint(o.checkpoint, sharded_content(setup, *optimizer, *group),
                              state_now());
    if (!lead) continue;  // the others go straight on to the next epoch's first all-reduce
    metrics.write({.time = unix_time(),
                   .epoch = epoch,
                   .step = global_step,
                   .split = "eval",
                   .loss = e.loss,
                   .acc = e.acc,
                   .lr = optimizer->lr(0),
                   .samples_per_s = e.samples_per_s});
    std::printf(
        "epoch %lld/%d: train loss %.4f acc %.3f | %s loss %.4f acc %s | %.0f img/s | "
        "lr %.3g\n",
        (long long)epoch, o.epochs, t.loss, t.acc, eval.c_str(), e.loss, percent(e.acc).c_str(),
        t.samples_per_s, optimizer->lr(0));
    if (t.skipped > 0)
      std::printf("epoch %lld: %lld step%s skipped: loss or gradients not finite\n",
                  (long long)epoch, (long long)t.skipped, t.skipped == 1 ? "" : "s");
    if (scaler.is_enabled())
      std::printf(
          "epoch %lld: gradient scaler skipped %lld step%s (inf/NaN gradients), %lld in "
          "all; scale now %g\n",
          (long long)epoch, (long long)t.scaler_skipped, t.scaler_skipped == 1 ? "" : "s",
          (long long)scaler.skipped_steps(), scaler.get_scale());
    std::fflush(stdout);
    if (whole_file) save_checkpoint(o.checkpoint, content, state_now());

    const bool last = epoch == o.epochs;
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    final_line = str("final ", eval, " accuracy: ", percent(e.acc), " (", source.eval_set, ", ",
                     with_commas(e.images), " ", noun, ")");
    report.headline = last ? final_line
                           : str("after epoch ", epoch, " of ", o.epochs, ": ", eval, " accuracy ",
                                 percent(e.acc), " (running)");
    report.run = {
        {"device", str(device, " (", get_num_threads(), " intra-op threads)", parallel_line)},
        {"seed", std::to_string(o.seed)},
        {"dataset", data_line},
        {"model", str(o.model, ", ", params, " parameters")},
        {"started", started},
        {"wall time", format_duration(wall) + (resumed.empty() ? "" : " (this session)")},
        {"status", last ? "finished" : str("epoch ", epoch, " of ", o.epochs, " done")}};
    if (!resumed.empty()) report.run.emplace_back("resumed from", resumed);
    if (group) report.run.emplace_back("communication (this rank)", group->stats().str());
    if (!memory.empty()) report.run.emplace_back("memory (this rank, after step 1)", memory);
    if (setup.pipe) report.sections = pipeline_sections(setup, o.pipeline_schedule);
    write_report(report_path, report, metrics.records());
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (lead)
    std::printf("%s\ntotal time %s; report: %s\n", final_line.c_str(),
                format_duration(wall).c_str(), report_path.c_str());
  if (group) parallel::destroy_process_group();
  return 0;
}

}  // namespace tandem::tools
