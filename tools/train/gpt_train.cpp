// tools/train/gpt_train.cpp — `tandem train --model gpt`: nanoGPT's train.py loop, top to bottom.
// Read the corpus (its characters are the vocabulary), build the GPT, AdamW with weight decay on
// matrices only, the warm-up + cosine schedule; then per iteration: maybe evaluate (the loss over
// fixed training and validation batches), checkpoint and rewrite the report; one step on a batch
// of random windows; clip the gradients; update. Every mode of step.h runs it unchanged.
//
// A batch is a function of (seed, iteration) alone (data::random_windows), so a resumed run sees
// the batches an uninterrupted one would, and DDP's ranks each take their rows of the one global
// batch: together they train on what one device would.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/core/generator.h>
#include <tandem/core/serialize/safetensors.h>
#include <tandem/core/thread_pool.h>
#include <tandem/data/shuffle.h>
#include <tandem/data/text_dataset.h>
#include <tandem/nn/optim/param_groups.h>
#include <tandem/parallel/comm/broadcast_object.h>
#include <tandem/parallel/fsdp/sharded_checkpoint.h>
#include <tandem/parallel/process_group.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "../commands.h"
#include "../plan/predict.h"
#include "checkpointing.h"
#include "config.h"
#include "data_source.h"
#include "epoch.h"
#include "gpt_rank.h"
#include "gpt_vocabulary.h"
#include "models.h"
#include "moe_setup.h"
#include "pipeline_report.h"
#include "progress.h"
#include "report.h"

namespace tandem::tools {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

// Seeds of the training batch at an iteration and of the k-th evaluation batch of a split: three
// streams that never meet.
uint64_t train_batch_seed(uint64_t seed, int64_t iteration) {
  return data::mix64(data::mix64(seed) ^ uint64_t(iteration));
}
uint64_t eval_batch_seed(uint64_t seed, int split, int64_t k) {
  return data::mix64(data::mix64(seed + 0x5EED0000ull + uint64_t(split)) ^ uint64_t(k));
}

// This rank's rows of a global batch.
Tensor rows_of(const Tensor& t, int rank, int world) {
  const int64_t n = t.size(0) / world;
  return t.narrow(0, n * rank, n);
}

// nanoGPT's estimate_loss: the mean loss over eval_iters batches of each split, in eval mode
// (dropout off), without a graph. Fixed batches: every evaluation scores the same windows.
std::pair<double, double> estimate_loss(Setup& s, const data::TextCorpus& corpus,
                                        const TrainOptions& o) {
  NoGradGuard no_grad;
  const WholeBatchRouting routing(*s.model);  // every rank evaluates the whole batch
  s.model->eval();
  double mean[2] = {0, 0};
  for (int split = 0; split < 2; ++split) {
    const Tensor& tokens = split == 0 ? corpus.train : corpus.val;
    for (int64_t k = 0; k < o.gpt.eval_iters; ++k) {
      auto [x, y] = data::random_windows(tokens, o.batch_size, o.gpt.block_size,
                                         eval_batch_seed(o.seed, split, k));
      mean[split] += eval_loss(s, x.to(s.device), y.to(s.device));
    }
    mean[split] /= double(o.gpt.eval_iters);
  }
  s.model->train();
  return {mean[0], mean[1]};
}

}  // namespace

int run_train_gpt(const TrainOptions& flags) {
  const Clock::time_point start = Clock::now();
  TrainOptions o = resolve_config(flags);
  const GptOptions& g = o.gpt;
  Placement placement = resolve_placement(o);
  if (dry_run()) return dry_run_done("train");
  std::shared_ptr<parallel::Communicator> group;
  if (placement.mode == Parallelism::DDP) group = join_ddp_group(placement, o);
  // --tp/--pp/--cp: the ranks as a (dp, [pp,] [cp,] tp) mesh; a batch's rows split over dp, and
  // the ranks of a tp or cp group, or of a pipeline, share rows (a cp group splits their
  // positions: train_step).
  std::shared_ptr<parallel::DeviceMesh> mesh =
      o.tp > 1 || o.pp > 1 || o.cp > 1 || o.ep > 1 ? make_mesh(group, o) : nullptr;
  const Device device = placement.device;
  const int rank = group ? group->rank() : 0;
  // The batch's rows split over dp (and over dp × ep with --ep: each rank routes its own rows).
  const int replica =
      mesh ? mesh->coordinate("dp") * o.ep + (o.ep > 1 ? mesh->coordinate("ep") : 0) : rank;
  const int replicas = mesh ? mesh->size("dp") * o.ep : group ? group->size() : 1;
  const bool lead = rank == 0;
  // The checkpoint directory is checked before any work, not at the first save (rank 0 writes a
  // whole file; with --sharded-checkpoint every rank its shards).
  if (!o.checkpoint.empty() && (lead || o.sharded_checkpoint))
    check_checkpoint_writable(o.checkpoint);
  if (lead && o.gpt.warmup_iters != flags.gpt.warmup_iters)
    std::printf(
        "note: the default --warmup-iters %lld is longer than --max-iters %lld: warming up "
        "over %lld iterations instead\n",
        (long long)flags.gpt.warmup_iters, (long long)g.max_iters, (long long)o.gpt.warmup_iters);

  // ---- data: the corpus's characters are the vocabulary (a resumed run keeps the saved one).
  const std::vector<std::string> files =
      g.text.empty() ? data::fortunes_files() : std::vector<std::string>{g.text};
  std::optional<data::CharTokenizer> vocabulary;
  if (o.resume) vocabulary = saved_vocabulary(o.checkpoint);
  const data::TextCorpus corpus =
      data::load_text_corpus(files, vocabulary ? &*vocabulary : nullptr);
  data::check_fits_windows(corpus, g.block_size);
  // The table's rows: the characters, padded for --vocab-multiple and for --tp's equal parts
  // (padding the model never reads: it computes what the unpadded one does).
  const int64_t characters = corpus.tokenizer.vocab_size(), vocab = table_rows(g, characters, o);

  // ---- model (drawn, cut and placed for this rank: gpt_rank.h), optimizer, schedule.
  // --predict: the run rehearsed on the meta device first, then measured (tools/plan/).
  std::optional<Prediction> predicted;
  if (o.predict) predicted.emplace(o, characters, group, device);
  if (const std::string t = predicted ? predicted->time_before() : ""; !t.empty())
    std::printf("%s", t.c_str());
  GptRank built = build_gpt_rank(o, characters, vocab, placement, group, mesh);
  if (predicted) predicted->probe().placed();
  Setup& setup = built.setup;
  std::shared_ptr<nn::Sequential> model = setup.model;  // with --pp, this rank's stage
  const VocabularyRows rows = built.rows;
  const std::string params = with_commas(built.parameters);
  std::shared_ptr<Generator> tp_stream = built.tp_stream;
  optim::Optimizer& optimizer = *built.optimizer;
  std::unique_ptr<optim::LRScheduler> scheduler;
  if (o.schedule == "cosine")
    scheduler =
        std::make_unique<optim::WarmupCosineLR>(optimizer, g.warmup_iters, g.max_iters, g.min_lr);

  // ---- resume, then autocast and the gradient scaler.
  int64_t iter = 0;
  std::string resumed_scaler;
  if (o.resume) {
    const TrainState state =
        load_checkpoint(o.checkpoint, fit_vocabulary_rows(restore_into(setup, optimizer), rows));
    default_generator(device).set_state(state.generator);
    if (setup.stages) {  // each stage its own seed (as above), at the first stage's offset
      GeneratorState own = state.generator;
      own.seed += 100 * uint64_t(setup.stages->stage_index());
      default_generator(device).set_state(own);
    }
    if (setup.tp && state.tp_rank_stream_offset) {
      tp_stream->set_state({tp_stream->get_state().seed, *state.tp_rank_stream_offset});
    }
    iter = state.global_step;
    // The loop ends on reaching --max-iters: from past it, it would never end.
    TD_CHECK_VALUE(iter <= g.max_iters, "train: --resume: ", o.checkpoint, " is at iteration ",
                   iter, ", past --max-iters ", g.max_iters,
                   "; a run cannot train backwards\n  hint: give --max-iters ", iter,
                   " or more (or start afresh without --resume)");
    if (iter == g.max_iters) {
      if (lead)
        std::printf(
            "the checkpoint in %s has finished all %lld iterations; raise --max-iters to "
            "train more\n",
            o.checkpoint.c_str(), (long long)iter);
      if (group) parallel::destroy_process_group();
      return 0;
    }
    resumed_scaler = state.grad_scaler_json;
    if (lead)
      std::printf("resuming from %s at iteration %lld\n", o.checkpoint.c_str(), (long long)iter);
    for (const std::string& d : config_differences(state.config_json, o))
      if (lead) std::printf("  note: changed since the checkpoint: %s\n", d.c_str());
  }
  if (scheduler) scheduler->set_step(iter);
  setup.amp = o.amp == "bf16" ? kBFloat16 : o.amp == "fp16" ? kFloat16 : kFloat32;
  enable_flash_attention(o.gpt.flash_attention);
  const std::unique_ptr<optim::GradScaler> scaler =
      make_grad_scaler(setup.amp, group.get(), device);
  if (!resumed_scaler.empty() && scaler->is_enabled())
    scaler->load_state_dict(optim::grad_scaler_state_from_json(resumed_scaler));
  setup.scaler = scaler.get();

  // ---- logging.
  // Named after the corpus: the fortunes package is many files, the first of which ("art") is
  // no name for it.
  const std::string corpus_name =
      g.text.empty() ? std::string("fortunes") : fs::path(g.text).stem().string();
  if (o.log_dir.empty()) o.log_dir = str("runs/gpt-", corpus_name);
  if (o.ddp) {  // one run, one directory: rank 0's name for it
    o.log_dir = parallel::broadcast_string(*group, o.log_dir);
  }
  fs::create_directories(o.log_dir);
  MetricsLog metrics((fs::path(o.log_dir) /
                      (lead ? "metrics.jsonl" : "metrics-rank" + std::to_string(rank) + ".jsonl"))
                         .string(),
                     o.resume ? iter : -1);
  const std::string data_line =
      str(corpus.source, ": ", with_commas(corpus.train.numel()), " train / ",
          with_commas(corpus.val.numel()), " validation characters, vocabulary ", characters,
          vocab == characters ? "" : str(" (padded to ", vocab, ")"));
  const std::string parallel_line = describe_parallelism(setup, o, group.get());
  const int64_t tokens_per_iter = o.batch_size * g.block_size;
  if (lead) {
    std::printf(
        "tandem train: gpt, %lld layers, %lld heads, %lld wide, context %lld (%s "
        "parameters) on %s, device %s%s\n",
        (long long)g.n_layer, (long long)g.n_head, (long long)g.n_embd, (long long)g.block_size,
        params.c_str(), data_line.c_str(), device.str().c_str(), parallel_line.c_str());
    std::printf(
        "%lld iterations x %lld tokens (batch %lld), AdamW lr %g -> %g, warm-up %lld, "
        "weight decay %g, clip %g, seed %llu; logs in %s\n",
        (long long)g.max_iters, (long long)tokens_per_iter, (long long)o.batch_size, *o.lr,
        g.min_lr, (long long)g.warmup_iters, o.weight_decay, g.grad_clip,
        (unsigned long long)o.seed, o.log_dir.c_str());
    std::fflush(stdout);
  }
  ReportInfo report{
      .title = str("gpt on ", g.text.empty() ? corpus_name : fs::path(g.text).filename().string()),
      .run = {},
      .config = config_rows(o),
      .eval_name = "validation",
      .headline = "",
      .language_model = true};
  const std::string config = config_json(o);

  // ---- the loop.
  // The lr is a function of the iteration: a skipped step still advances the schedule.
  Updater update{.setup = setup,
                 .optimizer = optimizer,
                 .scheduler = scheduler.get(),
                 .policy = {.clip = g.grad_clip,
                            .skip_nonfinite = o.skip_nonfinite,
                            .check_gradients = o.skip_nonfinite,
                            .world = group.get(),
                            .kept = "a --checkpoint holds the last evaluation",
                            .quiet = !lead}};
  model->train();
  std::string memory;  // --ddp: this rank's memory after the first step, beside the formula
  double interval_loss = 0;
  int64_t interval_iters = 0;
  Clock::time_point interval_start = Clock::now();
  double eval_seconds = 0;  // evaluation inside the current progress interval: not training time
  for (;; ++iter) {
    if (iter % g.eval_interval == 0 || iter == g.max_iters) {
      const Clock::time_point eval_start = Clock::now();
      CheckpointContent content;  // every rank: --zero's shards are gathered (rank 0 keeps them)
      const bool save = !o.checkpoint.empty() && iter > 0;
      if (save && !o.sharded_checkpoint) {
        content = checkpoint_content(setup, optimizer);
        unpad(content, rows);
      }
      std::pair<double, double> losses;
      if (lead || everyone_evaluates(setup)) losses = estimate_loss(setup, corpus, o);
      // What a checkpoint of this iteration records beside the tensors (after the evaluation,
      // which draws its batches from the generator).
      const auto state_now = [&] {
        return TrainState{
            .epoch = iter,
            .global_step = iter,
            .generator = default_generator(device).get_state(),
            .config_json = config,
            .grad_scaler_json = scaler->is_enabled() ? optim::to_json(scaler->state_dict()) : "",
            .vocabulary = corpus.tokenizer.to_string(),
            .tp_rank_stream_offset =
                setup.tp ? std::optional<uint64_t>(tp_stream->get_state().offset) : std::nullopt};
      };
      // The validation loss, or the training one when that is the non-finite one (rank 0's).
      check_evaluation_finite(std::isfinite(losses.first) ? losses.second : losses.first,
                              group.get(), str("at iteration ", iter), o.checkpoint);
      if (save && o.sharded_checkpoint)  // every rank writes its shards
        save_sharded_checkpoint(o.checkpoint, sharded_content(setup, optimizer, *group),
                                state_now());
      report.sections = {};  // the last step's schedule as it ran (a pipeline), for the report
      if (setup.stages || setup.pipe)
        report.sections = pipeline_sections(setup, o.pipeline_schedule);
      std::string step_times;  // --predict --profile: the steps so far beside the prediction
      if (auto section = predicted ? predicted->time_section(&step_times) : std::nullopt)
        report.sections.push_back(std::move(*section));
      if (lead && iter == g.max_iters && !step_times.empty()) std::printf("%s", step_times.c_str());
      if (lead) {
        const auto [train_loss, val_loss] = losses;
        std::printf("step %lld: train loss %.4f, val loss %.4f\n", (long long)iter, train_loss,
                    val_loss);
        std::fflush(stdout);
        const double now = unix_time(), lr = optimizer.lr(0);
        for (const auto& [split, loss] : {std::pair{"eval_train", train_loss}, {"eval", val_loss}})
          metrics.write(
              {.time = now, .epoch = iter, .step = iter, .split = split, .loss = loss, .lr = lr});
        if (save && !o.sharded_checkpoint) save_checkpoint(o.checkpoint, content, state_now());
        const bool last = iter == g.max_iters;
        report.headline =
            str(last ? "final" : "at iteration " + std::to_string(iter) + ":", " validation loss ",
                val_loss, " (train ", train_loss, ")", last ? "" : " (running)");
        report.run = {
            {"device", str(device, " (", get_num_threads(), " intra-op threads)", parallel_line)},
            {"seed", std::to_string(o.seed)},
            {"corpus", data_line},
            {"model", str("gpt, ", params, " parameters")},
            {"wall time", format_duration(seconds_since(start))},
            {"status", last ? "finished" : str("iteration ", iter, " of ", g.max_iters)}};
        if (group) report.run.emplace_back("communication (this rank)", group->stats().str());
        if (!memory.empty()) report.run.emplace_back("memory (this rank, after step 1)", memory);
        if (setup.moe) report.run.emplace_back("routing (last step)", routing_table(*model));
        write_report((fs::path(o.log_dir) / "report.html").string(), report, metrics.records());
      }
      eval_seconds += seconds_since(eval_start);
    }
    if (iter == g.max_iters) break;

    // One step: this rank's rows of the global batch, forward + backward, clip, update.
    auto [x, y] = data::random_windows(corpus.train, o.batch_size, g.block_size,
                                       train_batch_seed(o.seed, iter));
    optimizer.zero_grad();
    if (predicted) predicted->step_begins();
    const StepResult r = train_step(setup, rows_of(x, replica, replicas).to(device),
                                    rows_of(y, replica, replicas).to(device));
    const double loss = r.loss.item();
    const bool applied = apply_update(update, loss, str("iteration ", iter));  // clip, step, lr
    if (const std::string table = predicted ? predicted->after_step() : ""; !table.empty())
      std::printf("memory per rank, predicted / measured (MiB):\n%s", table.c_str());
    if (o.ddp && memory.empty()) {  // this rank's memory after its first step, beside the formula
      memory = memory_line(setup, o, replicas / o.ep * o.cp);  // ZeRO: over dp × cp
      if (lead)
        std::printf("memory per rank (rank 0, %s): %s\n", device.str().c_str(), memory.c_str());
    }
    if (applied) interval_loss += loss, ++interval_iters;

    if ((iter + 1) % g.log_interval == 0 || iter + 1 == g.max_iters) {
      const double secs = seconds_since(interval_start) - eval_seconds;
      const double rate = secs > 0 ? double(interval_iters * tokens_per_iter) / secs : 0;
      const double mean = interval_iters > 0 ? interval_loss / double(interval_iters) : NAN;
      metrics.write({.time = unix_time(),
                     .epoch = iter + 1,
                     .step = iter + 1,
                     .split = "train",
                     .loss = mean,
                     .lr = optimizer.lr(0),
                     .samples_per_s = rate,
                     .loss_scale = scaler->is_enabled() ? scaler->get_scale() : 0,
                     .skipped_steps = scaler->is_enabled() ? scaler->skipped_steps() : -1});
      if (lead)
        std::printf("iter %lld: loss %.4f, lr %.3g, %.0f tokens/s, %.1f ms/iter%s\n",
                    (long long)(iter + 1), mean, optimizer.lr(0), rate,
                    1e3 * secs / double(std::max<int64_t>(interval_iters, 1)),
                    setup.moe ? (", " + routing_line(*model)).c_str() : "");
      std::fflush(stdout);
      interval_loss = 0, interval_iters = 0;
      interval_start = Clock::now();
      eval_seconds = 0;
    }
  }
  if (lead && update.skipped > 0)
    std::printf("%lld step%s skipped: loss or gradients not finite\n", (long long)update.skipped,
                update.skipped == 1 ? "" : "s");
  if (lead)
    std::printf("total time %s; report: %s\n", format_duration(seconds_since(start)).c_str(),
                (fs::path(o.log_dir) / "report.html").string().c_str());
  if (group) parallel::destroy_process_group();
  return 0;
}

}  // namespace tandem::tools
