// tests/parallel/vocab_parallel_test.cpp — the vocabulary-parallel loss alone, against
// cross_entropy over the whole vocabulary, ignored targets included.
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/tp/vocab_parallel.h>

#include "support/expect.h"

namespace tandem::parallel::tp::vocab_parallel_test {  // named: unity builds join test files
namespace {

using tandem::testing::all_close;

// The loss from V/t columns per rank against cross_entropy over all V, with ignored targets,
// and its gradient against the matching columns of cross_entropy's.
TEST(VocabParallelCrossEntropy, MatchesCrossEntropyAndItsGradient) {
  constexpr int kWorld = 3;
  constexpr int64_t kN = 7, kV = 9;
  manual_seed(5);
  const Tensor logits = randn({kN, kV}, {.dtype = kFloat64}) * 3.0;
  const Tensor targets = from_vector(std::vector<int64_t>{0, 8, 4, -1, 3, 5, -1}, {kN});
  Tensor leaf = logits.detach().requires_grad_();
  const Tensor want = cross_entropy(leaf, targets, {.ignore_index = -1});
  want.backward();
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        const int64_t cols = kV / kWorld, start = g->rank() * cols;
        Tensor mine = logits.narrow(1, start, cols).contiguous().to(Device::cpu(g->rank()));
        mine.requires_grad_();
        const Tensor loss = vocab_parallel_cross_entropy(mine, targets.to(mine.device()), start, g);
        loss.backward();
        EXPECT_NEAR(loss.item(), want.item(), 1e-14);
        EXPECT_TRUE(all_close(mine.grad(), leaf.grad().narrow(1, start, cols), 1e-15, 1e-13));
      },
      kWorld);
}

}  // namespace
}  // namespace tandem::parallel::tp::vocab_parallel_test
