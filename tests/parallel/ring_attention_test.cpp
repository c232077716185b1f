// tests/parallel/ring_attention_test.cpp — ring and Ulysses attention compute one device's
// attention: over cp = 2, 4 and 8 ranks (threads), causal or not, zig-zag or contiguous, each
// rank's output and its q, k, v gradients are one device's at its positions, in float64 to 1e-12
// relative; the same over processes on shared memory and Gloo (MPI: tests/mpi/), and on cuda:0;
// the splits put a sequence back together; bad shapes are named.
#include <tandem/core/cuda_device.h>
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/cp/ring_attention.h>
#include <tandem/parallel/cp/ulysses_attention.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>

#include "parallel/collective_suite.h"
#include "parallel/context_attention_check.h"
#include "support/expect.h"

namespace tandem::parallel::cp {
namespace {

using namespace std::chrono_literals;
using tandem::testing::error_message;

using tandem::testing::rank_error;
using tandem::testing::whole_attention;
using Whole = tandem::testing::WholeAttention;

// Ring attention over 3 heads; Ulysses over 8 (they must divide by cp).
TEST(ContextAttention, EveryRankGetsOneDevicesOutputAndGradientsAtItsPositions) {
  for (bool ulysses : {false, true})
    for (int cp : {1, 2, 4, 8})
      for (SequenceSplit split : {SequenceSplit::ZigZag, SequenceSplit::Contiguous})
        for (bool causal : {true, false}) {
          const Whole w =
              whole_attention(4 * cp, causal, uint64_t(cp + (ulysses ? 20 : 0)), ulysses ? 8 : 3);
          std::vector<double> errors(static_cast<size_t>(cp));
          spawn_threads(
              [&](std::shared_ptr<Communicator> g) {
                errors[size_t(g->rank())] = rank_error(w, *g, split, causal, ulysses);
              },
              cp);
          for (int r = 0; r < cp; ++r)
            EXPECT_LE(errors[size_t(r)], 1e-12)
                << (ulysses ? "Ulysses" : "ring") << ", cp " << cp
                << (split == SequenceSplit::ZigZag ? " zig-zag" : " contiguous")
                << (causal ? " causal" : "") << ", rank " << r;
        }
}

TEST(ContextAttention, WithDropoutEveryRankDrawsOneDevicesNumbers) {
  for (bool ulysses : {false, true})
    for (int cp : {2, 4, 8})
      for (SequenceSplit split : {SequenceSplit::ZigZag, SequenceSplit::Contiguous}) {
        const Whole w = whole_attention(4 * cp, true, uint64_t(cp + 60), 8, 0.3);
        std::vector<double> errors(static_cast<size_t>(cp));
        spawn_threads(  // each rank on a device of its own, with its own generator
            [&](std::shared_ptr<Communicator> g) {
              errors[size_t(g->rank())] =
                  rank_error(w, *g, split, true, ulysses, Device::cpu(g->rank()), 0.3);
            },
            cp);
        for (int r = 0; r < cp; ++r)
          EXPECT_LE(errors[size_t(r)], 1e-12)
              << (ulysses ? "Ulysses" : "ring") << ", cp " << cp << ", rank " << r;
      }
}

TEST(ContextAttention, OverSharedMemoryAndGlooProcessesToo) {
  for (const char* backend : {"shm", "gloo"})
    for (int ranks : {2, 3})
      spawn(
          [backend](int) {
            auto g = init_process_group({.backend = backend, .timeout = 60s});
            tandem::testing::require(tandem::testing::context_attention_error(*g) <= 1e-12,
                                     str("ring and Ulysses attention over ", backend));
            destroy_process_group();
          },
          ranks);
}

TEST(ContextAttention, OnCuda0AsOnTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  for (bool ulysses : {false, true}) {
    const Whole w = whole_attention(16, true, 5, 4);
    std::vector<double> errors(2);
    spawn_threads(
        [&](std::shared_ptr<Communicator> g) {
          errors[size_t(g->rank())] =
              rank_error(w, *g, SequenceSplit::ZigZag, true, ulysses, Device::cuda(0));
        },
        2);
    for (double e : errors) EXPECT_LE(e, 1e-12) << (ulysses ? "Ulysses" : "ring");
  }
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
