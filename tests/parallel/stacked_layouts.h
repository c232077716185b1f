// tests/parallel/stacked_layouts.h — one rank's run of the drawn GPT (drawn_gpt.h) under any stack
// of the parallel modes, built as `tandem train` stacks them: activation checkpointing on the
// blocks, TP's plan (± sequence parallelism) over "tp", context parallelism over "cp", the
// pipeline's stage over "pp", then data parallelism over "dp" (DDP, ZeRO-1, ZeRO-2 or
// fully_shard; over dp × cp together with context parallelism), all recording into one placement
// table, which the clip, the partial-gradient reduction and the sharded checkpoint read. A step
// takes this rank's rows of the global batch (and its positions of them, under context
// parallelism), clips (a norm that bites) and updates with AdamW.
#pragma once

#include <tandem/autograd/autocast.h>
#include <tandem/parallel/clip_grad_norm.h>
#include <tandem/tandem.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/drawn_gpt.h"
#include "parallel/token_batch.h"

namespace tandem::testing::stacked {

inline constexpr int64_t kBatch = 4;  // the global batch
inline constexpr double kClip = 0.3;

enum class Data { DDP, Zero1, Zero2, FullyShard };

struct Stack {
  Data data = Data::DDP;
  int dp = 1, tp = 1, pp = 1, cp = 1;
  bool sp = false;  // sequence parallelism (with tp > 1)
  parallel::cp::Algorithm cp_algorithm = parallel::cp::Algorithm::Ring;  // with cp > 1
  parallel::cp::SequenceSplit cp_split = parallel::cp::SequenceSplit::ZigZag;
  parallel::PipelineSchedule schedule = parallel::PipelineSchedule::OneFOneB;
  int64_t chunks = 2;         // micro-batches per data rank's rows
  bool checkpointed = false;  // every block in nn::Checkpointed
  bool bf16 = false;          // float32 weights, the forward and loss under bfloat16 autocast
  int64_t heads = 4;          // the drawn GPT's (8: Ulysses over 8 ranks)
  double dropout = 0;         // everywhere nanoGPT has it (one device's masks: context parallelism)
  int world() const { return dp * tp * pp * cp; }
  std::string str() const {
    const char* data_names[] = {"DDP", "ZeRO-1", "ZeRO-2", "fully_shard"};
    std::string out = dp > 1 ? str_of(data_names[int(data)], " over ", dp) : "one data rank";
    if (tp > 1) out += str_of(" x TP ", tp, sp ? " + SP" : "");
    if (cp > 1)
      out += str_of(" x CP ", cp, " ", parallel::cp::to_string(cp_algorithm),
                    cp_split == parallel::cp::SequenceSplit::ZigZag ? " zig-zag" : " contiguous");
    if (pp > 1)
      out += str_of(" x PP ", pp, " ", parallel::to_string(schedule), " (", chunks, " chunks)");
    return out + (checkpointed ? ", checkpointed" : "") + (bf16 ? ", bf16 autocast" : "") +
           (heads != 4 ? str_of(", ", heads, " heads") : "") +
           (dropout > 0 ? str_of(", dropout ", dropout) : "");
  }

 private:
  template <typename... A>
  static std::string str_of(A&&... a) {
    return tandem::str(std::forward<A>(a)...);
  }
};

struct StepOutcome {
  double loss = 0;  // the global batch's mean loss
  double norm = 0;  // the gradient norm before clipping
};

/// One rank's run: what it trains (the table), the module holding its buffers, its optimizer
/// over the table's tensors (ZeRO's inner one), its step, and what follows a sharded load.
struct Member {
  std::shared_ptr<parallel::PlacementTable> table;
  std::shared_ptr<nn::Sequential> model;
  optim::Optimizer* local = nullptr;
  std::function<StepOutcome(int step)> step;
  std::function<void()> after_load = [] {};
  // The largest difference between a tied weight's copies (a pipeline's first and last stages'),
  // on every rank; collective. 0 without copies.
  std::function<double()> tied_difference = [] { return 0.0; };
  std::vector<std::shared_ptr<void>> keep;  // the mesh and the wrappers, alive for the run
};

/// |a − b| / |b| over all elements (|a − b| when b is zero).
inline double relative_error(const Tensor& a, const Tensor& b) {
  const double scale = std::sqrt(sum(b * b).item());
  return std::sqrt(sum((a - b) * (a - b)).item()) / (scale > 0 ? scale : 1);
}

inline std::pair<Tensor, Tensor> batch(int step) {
  return random_token_batch(kBatch, kDrawnT, kDrawnVocab, uint64_t(step + 70));
}

inline nn::Sequential gpt(bool checkpointed, int64_t heads, double dropout) {
  nn::Sequential copy = drawn_gpt(31, dropout, heads);
  return checkpointed ? with_checkpointed_blocks(copy) : copy;
}

/// Rank world->rank()'s run of `s` (world->size() == s.world(); one rank: one device).
inline Member build(const Stack& s, std::shared_ptr<parallel::Communicator> world) {
  using namespace parallel;
  Member m{.table = std::make_shared<PlacementTable>()};
  const Device dev = Device::cpu(world->rank());
  std::vector<int> sizes;
  std::vector<std::string> names;
  for (const auto& [name, size] : std::initializer_list<std::pair<const char*, int>>{
           {"dp", s.dp}, {"pp", s.pp}, {"cp", s.cp}, {"tp", s.tp}})
    if (size > 1) sizes.push_back(size), names.push_back(name);
  std::shared_ptr<DeviceMesh> mesh;
  if (!sizes.empty()) mesh = std::make_shared<DeviceMesh>(world, sizes, names);
  m.keep.push_back(mesh);
  nn::Sequential whole = gpt(s.checkpointed, s.heads, s.dropout);
  if (s.dropout > 0) {         // every rank's masks from its device's generator, from one state
    world->barrier()->wait();  // drawing a model seeds every device's: all are drawn now
    default_generator(dev).set_state({0xd509, 0});
  }
  if (s.bf16) whole.to(kFloat32);  // autocast turns float32 products into bfloat16 ones
  std::function<Tensor(const Tensor&, const Tensor&)> loss = [](const Tensor& o, const Tensor& y) {
    return nn::gpt_loss(o, y);
  };
  nn::Sequential model = std::move(whole);
  if (s.tp > 1) {
    const auto tp = mesh->group("tp");
    model = tp::tensor_parallel_gpt(model, tp, {.sequence_parallel = s.sp, .placements = m.table});
    loss = [tp](const Tensor& o, const Tensor& y) { return tp::gpt_loss(o, y, tp); };
  }
  const std::shared_ptr<Communicator> cpg = s.cp > 1 ? mesh->group("cp") : nullptr;
  if (cpg)
    model = cp::context_parallel(
        model, cpg, {.algorithm = s.cp_algorithm, .split = s.cp_split, .placements = m.table});
  std::shared_ptr<DistributedPipeline> pipe;
  if (s.pp > 1) {
    pipe = std::make_shared<DistributedPipeline>(
        model, mesh->group("pp"),
        DistributedPipelineOptions{
            .chunks = s.chunks, .schedule = s.schedule, .placements = m.table});
    m.model = std::shared_ptr<nn::Sequential>(pipe, &pipe->stage());
    m.keep.push_back(pipe);
    m.tied_difference = [pipe] {
      NoGradGuard no_grad;
      double worst = 0;
      for (const DistributedPipeline::Tied& t : pipe->tied())
        for (const auto& [name, p] : pipe->stage().named_parameters()) {
          if (name != t.name) continue;
          Tensor first = p.detach().clone();
          t.group->broadcast(first, 0)->wait();  // the first stage's copy
          worst = std::max(worst, abs(first - p.detach()).max().item());
        }
      return worst;
    };
  } else {
    m.model = std::make_shared<nn::Sequential>(std::move(model));
  }
  if (s.world() == 1) m.table->keep_only(m.model->named_parameters());
  move_to(*m.model, dev, *m.table);
  std::shared_ptr<DistributedDataParallel<nn::Sequential>> ddp;
  std::shared_ptr<FullyShardedModule> fsdp;
  // Data parallelism over dp, or over dp × cp together: each context rank's gradient is its
  // positions' share (parallel/cp/plan.h).
  const int n = s.dp * s.cp;
  std::shared_ptr<Communicator> dp;
  if (s.dp > 1 && s.cp > 1)
    dp = mesh->flatten({"dp", "cp"});
  else if (n > 1)
    dp = mesh->group(s.dp > 1 ? "dp" : "cp");
  const std::string dp_dim = s.cp > 1 ? "dp_cp" : "dp";
  if (n > 1 && s.data == Data::FullyShard) {
    fsdp = std::make_shared<FullyShardedModule>(
        m.model, FullyShardOptions{.group = dp, .placements = m.table, .mesh_dim = dp_dim});
    if (pipe) fully_shard_stages(*pipe, *fsdp);
  } else if (n > 1)
    ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(
        *m.model, DDPOptions{.group = dp,
                             .bucket_cap_mb = 0.01,
                             .zero_stage = s.data == Data::Zero1   ? 1
                                           : s.data == Data::Zero2 ? 2
                                                                   : 0,
                             .placements = m.table,
                             .mesh_dim = dp_dim});
  const auto groups = optim::adamw_groups(m.model->named_parameters(),
                                          {.lr = 1e-2, .beta2 = 0.99, .weight_decay = 0.1}, true);
  std::shared_ptr<optim::Optimizer> opt;
  if (ddp && s.data != Data::DDP) {
    std::shared_ptr<ZeroOptimizer> zero = zero_optimizer<optim::AdamW>(*ddp, groups);
    m.local = &zero->inner();
    m.after_load = [zero] { zero->shards().gather_parameters(); };
    opt = zero;
  } else {
    opt = std::make_shared<optim::AdamW>(groups);
    m.local = opt.get();
  }
  m.keep.insert(m.keep.end(), {ddp, fsdp, opt});
  const int k = s.dp > 1 ? mesh->coordinate("dp") : 0, rows = kBatch / s.dp;
  const std::shared_ptr<PlacementTable> table = m.table;
  const std::shared_ptr<nn::Sequential> module = m.model;
  m.step = [=](int step) {
    const auto [xs, ys] = batch(step);
    Tensor x = xs.narrow(0, k * rows, rows).to(dev), y = ys.narrow(0, k * rows, rows).to(dev);
    if (cpg) x = cp::shard_batch(x, *cpg, s.cp_split), y = cp::shard_batch(y, *cpg, s.cp_split);
    opt->zero_grad();
    Tensor l;
    if (pipe && ddp) {  // the micro-batches accumulate; one reduction over dp after them
      {
        const auto quiet = ddp->no_sync();
        const AutocastGuard autocast(DeviceType::CPU, kBFloat16, s.bf16);  // --amp bf16's scope
        l = pipe->step(x, y, loss).loss;
      }
      ddp->reduce_gradients();
    } else if (pipe) {
      const AutocastGuard autocast(DeviceType::CPU, kBFloat16, s.bf16);
      l = pipe->step(x, y, loss).loss;
    } else {
      {
        const AutocastGuard autocast(DeviceType::CPU, kBFloat16, s.bf16);  // forward and loss
        l = loss(fsdp ? (*fsdp)(x) : ddp ? (*ddp)(x) : (*module)(x), y);
      }
      l.backward();
    }
    reduce_partial_gradients(*table);
    const double norm = clip_grad_norm_(*table, kClip);
    opt->step();
    Tensor mean = l.detach().reshape({1}).to(dev);
    if (dp) dp->all_reduce(mean)->wait();
    return StepOutcome{mean.item() / n, norm};
  };
  return m;
}

}  // namespace tandem::testing::stacked
