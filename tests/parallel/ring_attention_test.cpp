// tests/parallel/ring_attention_test.cpp — ring and Ulysses attention compute one device's
// attention: over cp = 2, 4 and 8 ranks (threads), causal or not, zig-zag or contiguous, each
// rank's output and its q, k, v gradients are one device's at its positions, in float64 to 1e-12
// relative; the same over processes on shared memory; the splits put a sequence back together;
// bad shapes are named.
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/cp/ring_attention.h>
#include <tandem/parallel/cp/ulysses_attention.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>

#include "parallel/collective_suite.h"
#include "support/expect.h"

namespace tandem::parallel::cp {
namespace {

using namespace std::chrono_literals;
using tandem::testing::error_message;

// One device's attention over the whole sequence and its gradients under a loss Σ out·w.
struct Whole {
  Tensor q, k, v, w, out, dq, dk, dv;
};

Whole whole_attention(int64_t length, bool causal, uint64_t seed, int64_t heads = 3) {
  manual_seed(seed);
  Whole r;
  r.q = randn({2, heads, length, 8}, {.dtype = kFloat64}).requires_grad_(true);
  r.k = randn({2, heads, length, 8}, {.dtype = kFloat64}).requires_grad_(true);
  r.v = randn({2, heads, length, 6}, {.dtype = kFloat64}).requires_grad_(true);
  r.w = randn({2, heads, length, 6}, {.dtype = kFloat64});
  r.out = scaled_dot_product_attention(r.q, r.k, r.v, {.causal = causal});
  (r.out * r.w).sum().backward();
  r.dq = r.q.grad(), r.dk = r.k.grad(), r.dv = r.v.grad();
  return r;
}

// The largest difference over the largest magnitude: a relative error of the whole tensor.
double relative(const Tensor& got, const Tensor& want) {
  return abs(got - want).max().item() / std::max(abs(want).max().item(), 1e-300);
}

// This rank's part of ring (or Ulysses) attention over `whole`'s tensors, and its error against
// them.
double rank_error(const Whole& w, Communicator& g, SequenceSplit split, bool causal,
                  bool ulysses = false) {
  const int64_t cp = g.size(), r = g.rank();
  auto mine = [&](const Tensor& t) { return shard_sequence(t.detach(), 2, r, cp, split); };
  Tensor q = mine(w.q).requires_grad_(true), k = mine(w.k).requires_grad_(true),
         v = mine(w.v).requires_grad_(true);
  const ContextAttentionOptions o{.causal = causal, .split = split};
  const Tensor out = ulysses ? ulysses_attention(q, k, v, g, o) : ring_attention(q, k, v, g, o);
  (out * mine(w.w)).sum().backward();
  return std::max({relative(out, mine(w.out)), relative(q.grad(), mine(w.dq)),
                   relative(k.grad(), mine(w.dk)), relative(v.grad(), mine(w.dv))});
}

TEST(RingAttention, EveryRankGetsOneDevicesOutputAndGradientsAtItsPositions) {
  for (int cp : {1, 2, 4, 8})
    for (SequenceSplit split : {SequenceSplit::ZigZag, SequenceSplit::Contiguous})
      for (bool causal : {true, false}) {
        const Whole w = whole_attention(4 * cp, causal, uint64_t(cp));
        std::vector<double> errors(static_cast<size_t>(cp));
        spawn_threads(
            [&](std::shared_ptr<Communicator> g) {
              errors[size_t(g->rank())] = rank_error(w, *g, split, causal);
            },
            cp);
        for (int r = 0; r < cp; ++r)
          EXPECT_LE(errors[size_t(r)], 1e-12)
              << "cp " << cp << (split == SequenceSplit::ZigZag ? " zig-zag" : " contiguous")
              << (causal ? " causal" : "") << ", rank " << r;
      }
}

TEST(UlyssesAttention, EveryRankGetsOneDevicesOutputAndGradientsAtItsPositions) {
  for (int cp : {1, 2, 4, 8})
    for (SequenceSplit split : {SequenceSplit::ZigZag, SequenceSplit::Contiguous})
      for (bool causal : {true, false}) {
        const Whole w = whole_attention(4 * cp, causal, uint64_t(cp + 20), 8);
        std::vector<double> errors(static_cast<size_t>(cp));
        spawn_threads(
            [&](std::shared_ptr<Communicator> g) {
              errors[size_t(g->rank())] = rank_error(w, *g, split, causal, true);
            },
            cp);
        for (int r = 0; r < cp; ++r)
          EXPECT_LE(errors[size_t(r)], 1e-12)
              << "cp " << cp << (split == SequenceSplit::ZigZag ? " zig-zag" : " contiguous")
              << (causal ? " causal" : "") << ", rank " << r;
      }
}

TEST(RingAttention, OverSharedMemoryProcessesToo) {
  spawn(
      [](int) {
        auto g = init_process_group({.backend = "shm", .timeout = 60s});
        const Whole w = whole_attention(12, true, 7);  // every process draws the same
        tandem::testing::require(rank_error(w, *g, SequenceSplit::ZigZag, true) <= 1e-12,
                                 "ring attention over shm");
        const Whole h = whole_attention(12, true, 8, 6);
        tandem::testing::require(rank_error(h, *g, SequenceSplit::ZigZag, true, true) <= 1e-12,
                                 "Ulysses attention over shm");
        destroy_process_group();
      },
      3);
}

TEST(SequenceSplit, ZigZagGivesEachRankAnEarlyAndALateChunkAndPutsTheSequenceBack) {
  EXPECT_EQ(positions_of(0, 2, 8, SequenceSplit::ZigZag), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(positions_of(1, 2, 8, SequenceSplit::ZigZag), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(positions_of(1, 2, 8, SequenceSplit::Contiguous), (std::vector<int64_t>{4, 5, 6, 7}));
  const Tensor x = arange(24.0).reshape({2, 12});
  for (SequenceSplit split : {SequenceSplit::ZigZag, SequenceSplit::Contiguous}) {
    std::vector<Tensor> parts;
    for (int64_t r = 0; r < 3; ++r) parts.push_back(shard_sequence(x, 1, r, 3, split));
    EXPECT_EQ(unshard_sequence(parts, 1, split).to_vector<float>(), x.to_vector<float>());
  }
  EXPECT_THAT(
      error_message<ShapeError>([&] { shard_sequence(x, 1, 0, 4, SequenceSplit::ZigZag); }),
      ::testing::HasSubstr("a sequence of 12 positions does not split into 8 equal chunks"));
}

TEST(RingAttention, BadShapesAreNamed) {
  spawn_threads(
      [](std::shared_ptr<Communicator> g) {
        const Tensor q = zeros({1, 2, 4, 8}), k = zeros({1, 2, 5, 8}), odd = zeros({1, 2, 3, 8});
        EXPECT_THAT(error_message<ShapeError>([&] { ring_attention(q, k, k, *g); }),
                    ::testing::HasSubstr("must hold the same positions and batch"));
        EXPECT_THAT(error_message<ShapeError>([&] { ring_attention(odd, odd, odd, *g); }),
                    ::testing::HasSubstr("positions are not the zig-zag split's two equal chunks"));
        const Tensor three = zeros({1, 3, 4, 8});  // 3 heads over 2 ranks
        EXPECT_THAT(error_message<ShapeError>([&] { ulysses_attention(three, three, three, *g); }),
                    ::testing::HasSubstr("3 heads do not divide among the 2 ranks"));
      },
      2);
}

}  // namespace
}  // namespace tandem::parallel::cp
