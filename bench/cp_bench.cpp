// bench/cp_bench.cpp — context parallelism on this host, as ratios measured in one run.
//
//   cp_bench [--rounds N] [--quick]
//
// 1. Balance: the attention work of each rank of cp = 4 under the causal mask (T = 4096, batch
//    1, 4 heads of 32): the blocks the rank computes in ring attention, forward and backward,
//    timed one rank at a time on one thread (its compute alone: four ranks on two cores would
//    time the contention). Max/min over the ranks, zig-zag beside contiguous.
// 2. Overlap and bytes: ring attention forward + backward over 2 shared-memory processes (one
//    thread each) at the same sizes, against the same processes computing the same blocks with
//    no communication, at the same time; and the bytes the group's counters saw, beside the
//    formula: forward (cp − 1)/cp of k and of v, 2·(cp − 1)/cp of k; backward k, v, dk, dv
//    cp − 1 times and dk, dv once more, each a 1/cp block, (4·cp − 2)/cp of k. Ulysses beside
//    it: eight all-to-alls of a rank's 1/cp, 8·(cp − 1)/cp² of k, not overlapped.
// 3. Memory: a 4-layer GPT's activations per rank (the bytes its forward allocated and still
//    holds for backward) at T = 4096, one device against cp = 2, 4 and 8 thread ranks on
//    cpu:0..7, beside one device's / cp; and the longest context whose training steps fit 64 MiB
//    per device, one device against cp = 8, found by running them (two steps at each length).
// 4. Speed: a GPT training step at T = 2048 (forward, backward, gradients averaged, AdamW), cp = 2
//    over 2 shared-memory processes × 1 thread against one process × 2 threads, with DDP over
//    the same 2 processes (each half the batch, every position) beside it.
#include <tandem/tandem.h>
#include <unistd.h>

#include <fstream>

#include "bench_util.h"
#include "two_processes.h"

using namespace tandem;
using namespace tandem::parallel;

namespace {

constexpr int64_t kHeads = 4, kHeadDim = 32;

// Forward and backward of the blocks rank `rank` of `cp` computes, as ring attention computes
// them (one fused kernel call per query chunk × key chunk it sees), over q, k, v [1, H, T, D].
void rank_blocks(const Tensor& q, const Tensor& k, const Tensor& v, int64_t rank, int64_t cp,
                 cp::SequenceSplit split) {
  const int64_t n = cp::chunk_count(cp, split), c = q.size(2) / n;
  for (int64_t qc : cp::chunks_of(rank, cp, split))
    for (int64_t kc = 0; kc <= qc; ++kc) {
      const Tensor qb = q.narrow(2, qc * c, c).detach().requires_grad_(true);
      const Tensor kb = k.narrow(2, kc * c, c).detach().requires_grad_(true);
      const Tensor vb = v.narrow(2, kc * c, c).detach().requires_grad_(true);
      scaled_dot_product_attention(qb, kb, vb, {.causal = kc == qc}).sum().backward();
    }
}

void balance(int rounds, int64_t length) {
  constexpr int64_t kCp = 4;
  manual_seed(0);
  const Tensor q = randn({1, kHeads, length, kHeadDim}), k = randn(q.shape()), v = randn(q.shape());
  IntraOpThreadsGuard one(1);
  for (cp::SequenceSplit split : {cp::SequenceSplit::ZigZag, cp::SequenceSplit::Contiguous}) {
    // Round by round, every rank once per round: a busy moment of the host falls on all alike.
    std::vector<std::vector<double>> times(static_cast<size_t>(kCp));
    for (int64_t r = 0; r < kCp; ++r) rank_blocks(q, k, v, r, kCp, split);  // warm-up
    for (int round = 0; round < 2 * rounds; ++round)
      for (int64_t r = 0; r < kCp; ++r)
        times[size_t(r)].push_back(
            1e3 * bench::time_per_call([&] { rank_blocks(q, k, v, r, kCp, split); }, 1));
    std::vector<double> ms;
    for (const std::vector<double>& t : times) ms.push_back(bench::median(t));
    const auto [lo, hi] = std::minmax_element(ms.begin(), ms.end());
    std::printf("balance, cp = %lld, T = %lld, %s: attention ms per rank", (long long)kCp,
                (long long)length, split == cp::SequenceSplit::ZigZag ? "zig-zag" : "contiguous");
    for (double m : ms) std::printf(" %.1f", m);
    std::printf("; max/min %.3f\n", *hi / *lo);
  }
}

void overlap(int rounds, int64_t length) {
  bench::in_two_processes([&](Communicator& g, std::ofstream& o) {
    const int64_t cp = g.size();
    manual_seed(0);
    const Tensor q = randn({1, kHeads, length, kHeadDim}), k = randn(q.shape()),
                 v = randn(q.shape());
    const cp::SequenceSplit split = cp::SequenceSplit::ZigZag;
    auto mine = [&](const Tensor& t) { return cp::shard_sequence(t, 2, g.rank(), cp, split); };
    const Tensor qm = mine(q), km = mine(k), vm = mine(v);
    const auto ring = [&] {
      const Tensor a = qm.detach().requires_grad_(true), b = km.detach().requires_grad_(true),
                   c = vm.detach().requires_grad_(true);
      cp::ring_attention(a, b, c, g, {.split = split}).sum().backward();
    };
    const auto alone = [&] { rank_blocks(q, k, v, g.rank(), cp, split); };
    std::vector<double> with, without;
    ring(), alone();  // warm-up
    const uint64_t before = g.stats().total_bytes();
    Tensor a = qm.detach().requires_grad_(true), b = km.detach().requires_grad_(true),
           c = vm.detach().requires_grad_(true);
    const Tensor out = cp::ring_attention(a, b, c, g, {.split = split});
    const uint64_t forward = g.stats().total_bytes();
    out.sum().backward();
    const uint64_t backward = g.stats().total_bytes();
    for (int r = 0; r < rounds; ++r) {
      g.barrier()->wait();
      with.push_back(bench::median_call_ms(0, 1, ring));
      g.barrier()->wait();
      without.push_back(bench::median_call_ms(0, 1, alone));
    }
    // Ulysses beside it: its two all-to-alls (four exchanges each way) are not overlapped.
    const auto ulysses = [&] {
      const Tensor a2 = qm.detach().requires_grad_(true), b2 = km.detach().requires_grad_(true),
                   c2 = vm.detach().requires_grad_(true);
      cp::ulysses_attention(a2, b2, c2, g, {.split = split}).sum().backward();
    };
    ulysses();
    const uint64_t u0 = g.stats().total_bytes();
    ulysses();
    const uint64_t u1 = g.stats().total_bytes();
    std::vector<double> heads;
    for (int r = 0; r < rounds; ++r) {
      g.barrier()->wait();
      heads.push_back(bench::median_call_ms(0, 1, ulysses));
    }
    if (g.rank() != 0) return;
    const double kv = double(km.nbytes()) * double(cp);  // the whole sequence's k (= v) bytes
    const double n = double(cp), alone_ms = bench::median(without);
    o << str("overlap, cp = 2 over shm, T = ", length, ": ring attention forward + backward ",
             bench::median(with), " ms, its blocks without communication ", alone_ms, " ms, ratio ",
             bench::median(with) / alone_ms, "\n");
    o << str("  bytes sent by rank 0 (the group's counters): forward ",
             double(forward - before) / 1e6,
             " MB, formula 2(cp-1)/cp of k = ", 2 * (n - 1) / n * kv / 1e6, " MB; backward ",
             double(backward - forward) / 1e6,
             " MB, formula (4cp-2)/cp of k = ", (4 * n - 2) / n * kv / 1e6, " MB\n");
    o << str("  Ulysses forward + backward ", bench::median(heads), " ms, ratio ",
             bench::median(heads) / alone_ms, "; ", double(u1 - u0) / 1e6,
             " MB sent, formula 8(cp-1)/cp^2 of k = ", 8 * (n - 1) / (n * n) * kv / 1e6, " MB\n");
  });
}

nn::GPTConfig gpt_config(int64_t length) {
  return {.block_size = length,
          .vocab_size = 65,
          .n_layer = 4,
          .n_head = kHeads,
          .n_embd = kHeads * kHeadDim,
          .bias = false};
}

Tensor token_batch(int64_t batch, int64_t length) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < batch * length; ++i) ids.push_back((i * 7 + i / 5) % 65);
  return from_vector(ids, {batch, length});
}

// The most bytes any rank's device held over two training steps (forward, backward, AdamW,
// under DDP over the cp thread ranks) of the 4-layer GPT at `length`, batch 1.
double step_peak(int64_t length, int cp) {
  manual_seed(0);
  const nn::Sequential whole = nn::gpt(gpt_config(length));
  const Tensor ids = token_batch(1, length);
  std::vector<double> peaks(static_cast<size_t>(cp));
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        const Device dev = Device::cpu(g->rank());
        nn::Sequential m = cp == 1 ? nn::clone(whole) : cp::context_parallel(whole, g);
        m.to(dev);
        const Tensor mine =
            (cp == 1 ? ids : cp::shard_batch(ids, *g, cp::SequenceSplit::ZigZag)).to(dev);
        std::unique_ptr<DistributedDataParallel<nn::Sequential>> ddp;
        if (cp > 1)
          ddp =
              std::make_unique<DistributedDataParallel<nn::Sequential>>(m, DDPOptions{.group = g});
        optim::AdamW opt(m.parameters(), {.lr = 1e-4});
        reset_peak_memory_stats(dev);
        for (int step = 0; step < 2; ++step) {
          opt.zero_grad();
          nn::gpt_loss(ddp ? (*ddp)(mine) : m(mine), mine).backward();
          opt.step();
        }
        peaks[size_t(g->rank())] = double(memory_stats(dev).peak_allocated_bytes);
      },
      cp);
  return *std::max_element(peaks.begin(), peaks.end());
}

// The longest context (a multiple of 128 positions: zig-zag over 8 ranks, 8 chunks of 16) whose
// training steps fit `budget` bytes per device on cp ranks, found by running them: from `guess`,
// bracketed by steps of 1/4, then halved twice.
void longest_context(double budget, int cp, double guess) {
  constexpr int64_t kUnit = 128;
  const auto fits = [&](int64_t t) { return step_peak(t, cp) <= budget; };
  const auto round = [&](double t) { return std::max<int64_t>(kUnit, int64_t(t) / kUnit * kUnit); };
  int64_t lo = round(guess), hi = 0;
  if (fits(lo)) {
    for (hi = round(double(lo) * 1.25); fits(hi); hi = round(double(hi) * 1.25)) lo = hi;
  } else {
    for (hi = lo, lo = round(double(hi) * 0.8); !fits(lo) && lo > kUnit;
         lo = round(double(lo) * 0.8))
      hi = lo;
  }
  for (int i = 0; i < 2 && hi - lo > kUnit; ++i) {
    const int64_t mid = round(double(lo + hi) / 2);
    (fits(mid) ? lo : hi) = mid;
  }
  std::printf(
      "  longest context within %.0f MiB per device, run: %s %lld positions (peak %.1f "
      "MiB; %lld: %.1f MiB)\n",
      budget / (1 << 20), cp == 1 ? "one device" : "cp = 8 on cpu:0..7", (long long)lo,
      step_peak(lo, cp) / (1 << 20), (long long)hi, step_peak(hi, cp) / (1 << 20));
}

void memory(int64_t length, bool search) {
  manual_seed(0);
  const nn::Sequential whole = nn::gpt(gpt_config(length));
  const Tensor ids = token_batch(1, length);
  double one = 0;
  {
    nn::Sequential m = nn::clone(whole);
    const int64_t before = memory_stats(Device::cpu()).allocated_bytes;
    const Tensor loss = nn::gpt_loss(m(ids), ids);
    one = double(memory_stats(Device::cpu()).allocated_bytes - before);
  }
  std::printf(
      "memory, 4-layer GPT, T = %lld, batch 1, float32: one device %.1f MB of activations\n",
      (long long)length, one / 1e6);
  double per_position_at_8 = 0;  // a rank's activation bytes per position of the sequence, cp = 8
  for (int cp : {2, 4, 8}) {
    double held = 0;
    spawn_threads(
        [&](std::shared_ptr<Communicator> g) {
          const Device dev = Device::cpu(g->rank());
          nn::Sequential m = cp::context_parallel(whole, g);
          m.to(dev);
          const Tensor mine = cp::shard_batch(ids, *g, cp::SequenceSplit::ZigZag).to(dev);
          g->barrier()->wait();
          const int64_t before = memory_stats(dev).allocated_bytes;
          const Tensor loss = nn::gpt_loss(m(mine), mine);
          g->barrier()->wait();
          if (g->rank() == 0) held = double(memory_stats(dev).allocated_bytes - before);
          g->barrier()->wait();
        },
        cp);
    std::printf("  cp = %d: %.1f MB per rank = %.3f of one device's (1/cp = %.3f)\n", cp,
                held / 1e6, held / one, 1.0 / cp);
    if (cp == 8) per_position_at_8 = held / double(length);
  }
  // The fused attention keeps no T x T scores, so the activations grow as T: from the bytes per
  // position, the longest context a budget allows, which longest_context() then runs.
  if (!search) return;
  nn::Sequential counted = whole;                                 // the same tensors
  const double fixed = 16.0 * double(counted.parameter_count());  // weights, grads, AdamW
  longest_context(64.0 * (1 << 20), 1, (64.0 * (1 << 20) - fixed) / (1.6 * one / double(length)));
  longest_context(64.0 * (1 << 20), 8, (64.0 * (1 << 20) - fixed) / (1.6 * per_position_at_8));
}

// The GPT step's median ms: `forward` on this rank's ids, gpt_loss, backward, `reduce`, AdamW.
double gpt_step_ms(int rounds, nn::Sequential& model, const Tensor& ids,
                   const std::function<Tensor(const Tensor&)>& forward) {
  optim::AdamW opt(model.parameters(), {.lr = 1e-4});
  return bench::median_call_ms(1, rounds, [&] {
    opt.zero_grad();
    nn::gpt_loss(forward(ids), ids).backward();
    opt.step();
  });
}

void speed(int rounds, int64_t length) {
  constexpr int64_t kBatch = 2;
  manual_seed(0);
  const nn::Sequential whole = nn::gpt(gpt_config(length));
  const Tensor ids = token_batch(kBatch, length);
  nn::Sequential one = nn::clone(whole);
  const double alone = gpt_step_ms(rounds, one, ids, [&](const Tensor& x) { return one(x); });
  std::printf("speed, 4-layer GPT, T = %lld, batch %lld: one process x %d threads %.1f ms\n",
              (long long)length, (long long)kBatch, get_num_threads(), alone);
  bench::in_two_processes([&](Communicator& g, std::ofstream& o) {
    std::shared_ptr<Communicator> group(&g, [](Communicator*) {});
    nn::Sequential cp_model = cp::context_parallel(whole, group);
    DistributedDataParallel<nn::Sequential> ddp(cp_model, {.group = group});
    const Tensor mine = cp::shard_batch(ids, g, cp::SequenceSplit::ZigZag);
    const double cp_ms =
        gpt_step_ms(rounds, cp_model, mine, [&](const Tensor& x) { return ddp(x); });
    nn::Sequential dp_model = nn::clone(whole);
    DistributedDataParallel<nn::Sequential> dp(dp_model, {.group = group});
    const Tensor rows = ids.narrow(0, g.rank() * kBatch / 2, kBatch / 2);
    const double dp_ms =
        gpt_step_ms(rounds, dp_model, rows, [&](const Tensor& x) { return dp(x); });
    if (g.rank() == 0)
      o << str("  cp = 2 over 2 shm processes x 1 thread: ", cp_ms, " ms (ratio ", cp_ms / alone,
               " of one process); DDP over the same 2: ", dp_ms, " ms (ratio ", dp_ms / alone,
               ")\n");
  });
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 5);
  bench::report_load();
  const int64_t t = args.quick ? 1024 : 4096;
  balance(args.rounds, t);
  overlap(args.rounds, t);
  memory(t, !args.quick);
  speed(args.rounds, args.quick ? 512 : 2048);
  return 0;
}
