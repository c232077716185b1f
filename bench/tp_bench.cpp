// bench/tp_bench.cpp — tensor (and pipeline) parallelism on this host, as ratios measured in one
// run.
//
//   tp_bench [--rounds N]
//
// 1. Step time (forward, backward, AdamW) of TP = 2 — two thread ranks on cpu:0 and cpu:1, each
//    with half of the intra-op threads — against one device with all of them: a 4096-wide MLP
//    block (Linear 4096→16384, GELU, Linear 16384→4096, 128 tokens) and nanoGPT's CPU-recipe GPT
//    (4 layers, 4 heads, 128 wide, context 64, batch 12), the latter with and without sequence
//    parallelism, and as PP = 2: two pipeline stages (DistributedPipeline, 1F1B, 4 micro-batches),
//    whose bubble alone is (K − 1)/(M + K − 1) = 1/5 of the step. On a host with 2 cores TP = 2 can
//    at best match one device: the same flops on the same cores, plus the all-reduces; the ratio
//    says what the communication and the smaller products cost.
// 2. Memory per rank of one GPT block (s = 256 positions, b = 4, h = 256, a = 4 heads): its
//    parameters, and the activations its forward keeps for backward (bytes allocated by the
//    forward and still held), beside Korthikanti et al. 2022's per-layer formula in float32:
//    2·sbh(10 + 24/t + 5as/(ht)) bytes, 2·sbh(34 + 5as/h)/t with sequence parallelism. (Their
//    5as/h term is the attention's s×s scores, softmax and dropout mask; Tandem's fused attention
//    keeps none of them, so it should come in below the formula by that term.)
#include <tandem/tandem.h>

#include "bench_util.h"

using namespace tandem;
using namespace tandem::parallel;

namespace {

// Median ms per call of step() on every rank of `world` thread ranks (world 1: this thread, all
// cores), after a barrier; rank 0's median.
template <typename Make>
double step_ms(int world, int rounds, Make&& make) {
  if (world == 1) {
    auto step = make(nullptr, Device::cpu());
    const int reps = bench::calibrate(step, 0.5);
    std::vector<double> ms;
    for (int r = 0; r < rounds; ++r) ms.push_back(1e3 * bench::time_per_call(step, reps));
    return bench::median(ms);
  }
  double result = 0;
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        IntraOpThreadsGuard share(std::max(1, get_num_threads() / world));
        auto step = make(g, Device::cpu(g->rank()));
        step();  // warm-up
        std::vector<double> ms;
        for (int r = 0; r < rounds; ++r) {
          g->barrier()->wait();
          const double t0 = bench::now_s();
          step();
          g->barrier()->wait();
          ms.push_back(1e3 * (bench::now_s() - t0));
        }
        if (g->rank() == 0) result = bench::median(ms);
      },
      world);
  return result;
}

void mlp_block(int rounds) {
  constexpr int64_t kTokens = 128, kH = 4096;
  manual_seed(0);
  const nn::Linear fc1(kH, 4 * kH), fc2(4 * kH, kH);
  const Tensor x = randn({kTokens, kH}), target = randn({kTokens, kH});
  auto make = [&](std::shared_ptr<Communicator> g, Device dev) {
    struct Step {
      std::shared_ptr<nn::Module> a, b;
      std::function<Tensor(const Tensor&)> forward;
      std::shared_ptr<optim::AdamW> opt;
      Tensor x, target;
      void operator()() {
        opt->zero_grad();
        mse_loss(forward(x), target).backward();
        opt->step();
      }
    } s;
    if (!g) {
      auto a = std::make_shared<nn::Linear>(nn::clone(fc1)),
           b = std::make_shared<nn::Linear>(nn::clone(fc2));
      s.forward = [a, b](const Tensor& in) { return (*b)(gelu((*a)(in))); };
      s.a = a, s.b = b;
    } else {
      auto a = std::make_shared<tp::ColumnParallelLinear>(fc1, g);
      auto b = std::make_shared<tp::RowParallelLinear>(fc2, g);
      a->to(dev), b->to(dev);
      s.forward = [a, b](const Tensor& in) { return (*b)(gelu((*a)(in))); };
      s.a = a, s.b = b;
    }
    nn::StateDict params;
    for (auto& [n, p] : s.a->named_parameters()) params.emplace_back("a." + n, p);
    for (auto& [n, p] : s.b->named_parameters()) params.emplace_back("b." + n, p);
    s.opt = std::make_shared<optim::AdamW>(optim::adamw_groups(params, {.lr = 1e-4}));
    s.x = x.to(dev), s.target = target.to(dev);
    return s;
  };
  const double one = step_ms(1, rounds, make), two = step_ms(2, rounds, make);
  std::printf(
      "MLP block 4096 -> 16384 -> 4096, %lld tokens, float32: one device %.1f ms, "
      "TP = 2 %.1f ms, ratio %.2f (lower is better)\n",
      (long long)kTokens, one, two, two / one);
}

// nanoGPT's CPU-recipe GPT, one device against TP = 2 with and without sequence parallelism.
void gpt(int rounds) {
  constexpr int64_t kB = 12, kT = 64, kV = 64;  // 64: the vocabulary divides by 2
  manual_seed(0);
  nn::Sequential whole = nn::gpt({.block_size = kT,
                                  .vocab_size = kV,
                                  .n_layer = 4,
                                  .n_head = 4,
                                  .n_embd = 128,
                                  .bias = false});
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < kB * (kT + 1); ++i) ids.push_back((i * 7 + i / 5) % kV);
  const Tensor tokens = from_vector(ids, {kB, kT + 1});
  const Tensor x = tokens.narrow(1, 0, kT).contiguous(), y = tokens.narrow(1, 1, kT).contiguous();
  auto make_with = [&](bool sequence_parallel) {
    return [&, sequence_parallel](std::shared_ptr<Communicator> g, Device dev) {
      auto table = std::make_shared<PlacementTable>();  // the plan's cuts, for the clip
      auto model = std::make_shared<nn::Sequential>(
          g ? tp::tensor_parallel_gpt(whole, g,
                                      {.sequence_parallel = sequence_parallel, .placements = table})
            : nn::clone(whole));
      move_to(*model, dev, *table);
      auto opt = std::make_shared<optim::AdamW>(optim::adamw_groups(
          model->named_parameters(), {.lr = 1e-3, .beta2 = 0.99, .weight_decay = 0.1}));
      return [model, opt, g, table, x = x.to(dev), y = y.to(dev)] {
        opt->zero_grad();
        if (g) {
          tp::gpt_loss((*model)(x), y, g).backward();
          reduce_partial_gradients(*table);
          clip_grad_norm_(*table, 1.0);
        } else {
          nn::gpt_loss((*model)(x), y).backward();
          optim::clip_grad_norm_(model->parameters(), 1.0);
        }
        opt->step();
      };
    };
  };
  // PP = 2: two stages of the same GPT (DistributedPipeline), 1F1B over 4 micro-batches.
  auto pipelined = [&](std::shared_ptr<Communicator> g, Device dev) {
    auto model = std::make_shared<nn::Sequential>(nn::clone(whole));
    auto pipe = std::make_shared<DistributedPipeline>(
        *model, g, DistributedPipelineOptions{.chunks = 4, .schedule = PipelineSchedule::OneFOneB});
    move_to(pipe->stage(), dev, *pipe->placements());
    auto opt = std::make_shared<optim::AdamW>(optim::adamw_groups(
        pipe->stage().named_parameters(), {.lr = 1e-3, .beta2 = 0.99, .weight_decay = 0.1}, true));
    return [model, pipe, opt, g, x = x.to(dev), y = y.to(dev)] {
      opt->zero_grad();
      pipe->step(x, y, [](const Tensor& out, const Tensor& t) { return nn::gpt_loss(out, t); });
      clip_grad_norm_(*pipe->placements(), 1.0);
      opt->step();
    };
  };
  const double one = step_ms(1, rounds, make_with(false)),
               two = step_ms(2, rounds, make_with(false));
  const double sp = step_ms(2, rounds, make_with(true)), pp = step_ms(2, rounds, pipelined);
  std::printf(
      "GPT (nanoGPT CPU recipe, batch %lld x %lld): one device %.2f ms, TP = 2 %.2f ms "
      "(ratio %.2f), TP = 2 + sequence parallel %.2f ms (ratio %.2f), PP = 2 (1F1B, 4 "
      "micro-batches) %.2f ms (ratio %.2f)\n",
      (long long)kB, (long long)kT, one, two, two / one, sp, sp / one, pp, pp / one);
}

// One block's parameters and forward activations per rank, beside the formulas.
void block_memory() {
  constexpr int64_t kS = 256, kBatch = 4, kH = 256, kHeads = 4;
  manual_seed(1);
  const nn::Block whole({.block_size = kS,
                         .vocab_size = 8,
                         .n_layer = 1,
                         .n_head = kHeads,
                         .n_embd = kH,
                         .bias = true});
  const Tensor x = randn({kBatch, kS, kH});
  const double sbh = double(kS * kBatch * kH), as_h = double(kHeads * kS) / double(kH);
  std::printf("one block, s %lld, b %lld, h %lld, %lld heads, float32: MB per rank\n",
              (long long)kS, (long long)kBatch, (long long)kH, (long long)kHeads);
  std::printf("%-22s %10s %12s %14s %14s\n", "layout", "weights", "activations", "Korthikanti",
              "without 5as/h");
  auto report = [&](const char* name, int t, bool sp, double weights, double held) {
    const double formula =
        sp ? 2 * sbh * (34 + 5 * as_h) / t : 2 * sbh * (10 + 24.0 / t + 5 * as_h / t);
    const double no_scores = sp ? 2 * sbh * 34 / t : 2 * sbh * (10 + 24.0 / t);
    std::printf("%-22s %10.2f %12.2f %14.2f %14.2f\n", name, weights / 1e6, held / 1e6,
                formula / 1e6, no_scores / 1e6);
  };
  {
    nn::Block b = nn::clone(whole);
    const Tensor in = x.detach().requires_grad_();
    const int64_t before = memory_stats(Device::cpu()).allocated_bytes;
    const Tensor out = b(in);
    report("one device", 1, false, double(b.parameter_count() * 4),
           double(memory_stats(Device::cpu()).allocated_bytes - before));
  }
  for (bool sp : {false, true}) {
    double weights = 0, held = 0;
    spawn_threads(
        [&](std::shared_ptr<Communicator> g) {
          const Device dev = Device::cpu(g->rank());
          nn::Sequential one;
          one.push_back("h", whole);
          nn::Sequential cut = tp::parallelize(one, g, tp::block_plan(), {.sequence_parallel = sp});
          nn::Block& b = cut.at<nn::Block>(0);
          b.to(dev);
          const int64_t mine = sp ? kS / 2 : kS;
          const Tensor in =
              x.narrow(1, sp ? g->rank() * mine : 0, mine).to(dev).detach().requires_grad_();
          g->barrier()->wait();
          const int64_t before = memory_stats(dev).allocated_bytes;
          const Tensor out = b(in);
          g->barrier()->wait();
          if (g->rank() == 0) {
            weights = double(b.parameter_count() * 4);
            held = double(memory_stats(dev).allocated_bytes - before);
          }
          g->barrier()->wait();
        },
        2);
    report(sp ? "TP = 2, sequence par." : "TP = 2", 2, sp, weights, held);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 5);
  bench::report_load();
  std::printf("%d intra-op threads in all\n", get_num_threads());
  mlp_block(args.rounds);
  gpt(args.rounds);
  block_memory();
  return 0;
}
