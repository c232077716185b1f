// tests/parallel/tp_accounting_test.cpp — what a tensor-parallel transformer block costs, counted:
// per block, forward all-reduces two [B, T, C] tensors and backward two (Megatron-LM's count:
// 4·(t−1)/t·2·BTC·bytes on the wire a rank, all-reduce counted as a ring does), and each rank
// holds the sliced weights' 1/t plus the replicated LayerNorms and row-layer biases:
// (12C² + 7C)/t + 6C parameters, from one device's 12C² + 13C.
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

void expect_block_costs(int world) {
  manual_seed(3);
  const nn::Block whole(config());
  const Tensor x = randn({kB, kT, kC}, {.dtype = kFloat64});
  const Tensor dy = randn({kB, kT, kC}, {.dtype = kFloat64});
  EXPECT_EQ(nn::Block(whole).parameter_count(), 12 * kC * kC + 13 * kC);
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        const Device dev = Device::cpu(g->rank());
        ParallelBlock block(whole, g);
        block.to(dev);
        EXPECT_EQ(block.parameter_count(), (12 * kC * kC + 7 * kC) / world + 6 * kC)
            << "TP = " << world;
        const Tensor in = x.to(dev).detach().requires_grad_();
        const CommStats before = g->stats();
        Tensor y = block(in);
        const CommStats forward = g->stats();
        y.backward(dy.to(dev));
        const CommStats after = g->stats();
        const uint64_t tensor_bytes = uint64_t(kB * kT * kC) * sizeof(double);
        const uint64_t wire = 2 * tensor_bytes * uint64_t(world - 1) / uint64_t(world);
        auto all_reduce = [](const CommStats& s) {
          return s.ops.count("all_reduce") ? s.ops.at("all_reduce") : CommStats::Entry{};
        };
        EXPECT_EQ(all_reduce(forward).calls - all_reduce(before).calls, 2u) << "forward";
        EXPECT_EQ(all_reduce(after).calls - all_reduce(forward).calls, 2u) << "backward";
        EXPECT_EQ(all_reduce(after).bytes - all_reduce(before).bytes, 4 * wire);
        EXPECT_EQ(after.ops.size(), 1u) << "nothing but all-reduces: " << after.str();
      },
      world);
}

TEST(TensorParallelAccounting, ABlockAllReducesTwiceEachWayAndHoldsOneTthOfItsWeights) {
  expect_block_costs(2);
  expect_block_costs(4);
}

}  // namespace
}  // namespace tandem::parallel::tp
