// GradScaler under DDP: an inf in one rank's gradients makes every rank skip the step, so the
// replicas stay identical. The inf is injected after DDP's all-reduce, on rank 0 only, which is
// exactly the case the found-inf all-reduce exists for (an inf in the loss would reach every rank
// through the gradient average anyway).
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>
#include <limits>

#include "data/temp_dir.h"
#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;

TEST(GradScalerDDP, AnInfOnOneRankMakesEveryRankSkip) {
  tandem::testing::TempDir dir;
  spawn(
      [&](int rank) {
        init_process_group({.timeout = 60s});
        manual_seed(0);
        nn::Linear model(3, 2);
        DistributedDataParallel ddp(model);
        optim::SGD opt(model.parameters(), {.lr = 0.1});
        optim::GradScaler scaler(
            {.all_reduce = [](Tensor& t) { default_group().all_reduce(t)->wait(); }});
        const Tensor x = ones({4, 3});
        const std::vector<double> before = tandem::testing::flat_params(model);
        for (int step = 0; step < 2; ++step) {
          opt.zero_grad();
          scaler.scale(ddp(x).sum()).backward();
          if (step == 0 && rank == 0) {  // after the all-reduce: only rank 0 sees it
            Tensor g = model.weight.grad();
            NoGradGuard no_grad;
            g.fill_(std::numeric_limits<double>::infinity());
          }
          scaler.step(opt);
          EXPECT_EQ(scaler.last_step_skipped(), step == 0) << "rank " << rank << " step " << step;
          scaler.update();
          if (step == 0) {
            EXPECT_EQ(tandem::testing::flat_params(model), before) << "rank " << rank;
          }
        }
        EXPECT_EQ(scaler.skipped_steps(), 1);
        EXPECT_EQ(scaler.get_scale(), 32768.0);
        tandem::testing::write_doubles(dir.file("rank" + std::to_string(rank)),
                                       tandem::testing::flat_params(model));
        destroy_process_group();
      },
      2);
  EXPECT_EQ(tandem::testing::read_doubles(dir.file("rank0")),
            tandem::testing::read_doubles(dir.file("rank1")));
}

}  // namespace
}  // namespace tandem::parallel
