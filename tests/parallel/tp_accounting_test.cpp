// tests/parallel/tp_accounting_test.cpp — what a tensor-parallel transformer block costs, counted:
// per block, forward all-reduces two [B, T, C] tensors and backward two (Megatron-LM's count:
// 4·(t−1)/t·2·BTC·bytes on the wire a rank, all-reduce counted as a ring does), and each rank
// holds the sliced weights' 1/t plus the replicated LayerNorms and row-layer biases:
// (12C² + 7C)/t + 6C parameters, from one device's 12C² + 13C. With sequence parallelism each
// all-reduce becomes an all-gather and a reduce-scatter of the same total bytes, and backward
// all-gathers each column layer's input once more (Megatron-LM's: a rank keeps only its
// positions of it, 1/t of the memory).
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/tp/gpt.h>

#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel::tp {
namespace {

constexpr int64_t kB = 2, kT = 8, kC = 16;

nn::GPTConfig config() {
  return {.block_size = kT,
          .vocab_size = 8,
          .n_layer = 1,
          .n_head = 4,
          .n_embd = kC,
          .dropout = 0.0,
          .bias = true,
          .tensor = {.dtype = kFloat64}};
}

void expect_block_costs(int world, bool sequence_parallel) {
  manual_seed(3);
  const nn::Block whole(config());
  const Tensor x = randn({kB, kT, kC}, {.dtype = kFloat64});
  const Tensor dy = randn({kB, kT, kC}, {.dtype = kFloat64});
  EXPECT_EQ(nn::Block(whole).parameter_count(), 12 * kC * kC + 13 * kC);
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        const Device dev = Device::cpu(g->rank());
        nn::Sequential one;
        one.push_back("h", whole);
        nn::Sequential cut =
            parallelize(one, g, block_plan(), {.sequence_parallel = sequence_parallel});
        nn::Block& block = cut.at<nn::Block>(0);
        block.to(dev);
        EXPECT_EQ(block.parameter_count(), (12 * kC * kC + 7 * kC) / world + 6 * kC)
            << "TP = " << world;
        // With sequence parallelism the block reads and writes this rank's positions.
        const int64_t mine = sequence_parallel ? kT / world : kT;
        const Tensor in = x.narrow(1, sequence_parallel ? g->rank() * mine : 0, mine)
                              .to(dev)
                              .detach()
                              .requires_grad_();
        const CommStats before = g->stats();
        Tensor y = block(in);
        const CommStats forward = g->stats();
        y.backward(dy.narrow(1, sequence_parallel ? g->rank() * mine : 0, mine).to(dev));
        const CommStats after = g->stats();
        const uint64_t tensor_bytes = uint64_t(kB * kT * kC) * sizeof(double);
        const uint64_t wire = 2 * tensor_bytes * uint64_t(world - 1) / uint64_t(world);
        auto op = [](const CommStats& s, const char* name) {
          return s.ops.count(name) ? s.ops.at(name) : CommStats::Entry{};
        };
        auto calls = [&](const CommStats& a, const CommStats& b, const char* name) {
          return op(b, name).calls - op(a, name).calls;
        };
        if (!sequence_parallel) {
          EXPECT_EQ(calls(before, forward, "all_reduce"), 2u) << "forward";
          EXPECT_EQ(calls(forward, after, "all_reduce"), 2u) << "backward";
          EXPECT_EQ(after.ops.size(), 1u) << "nothing but all-reduces: " << after.str();
        } else {  // each all-reduce becomes an all-gather and a reduce-scatter, and backward
                  // gathers each column layer's input again (only its positions were saved)
          EXPECT_EQ(calls(before, forward, "all_gather"), 2u) << "forward";
          EXPECT_EQ(calls(before, forward, "reduce_scatter"), 2u) << "forward";
          EXPECT_EQ(calls(forward, after, "all_gather"), 4u) << "backward";
          EXPECT_EQ(calls(forward, after, "reduce_scatter"), 2u) << "backward";
          EXPECT_EQ(after.ops.count("all_reduce"), 0u) << after.str();
        }
        // 4 all-reduces' worth of bytes on the wire (an all-gather or a reduce-scatter is half
        // of one), and with sequence parallelism the two gathers again in backward.
        EXPECT_EQ(after.total_bytes() - before.total_bytes(), (sequence_parallel ? 5 : 4) * wire)
            << after.str();
      },
      world);
}

TEST(TensorParallelAccounting, ABlockAllReducesTwiceEachWayAndHoldsOneTthOfItsWeights) {
  expect_block_costs(2, false);
  expect_block_costs(4, false);
}

TEST(TensorParallelAccounting, SequenceParallelGathersScattersAndGathersInputsAgain) {
  expect_block_costs(2, true);
  expect_block_costs(4, true);
}

}  // namespace
}  // namespace tandem::parallel::tp
