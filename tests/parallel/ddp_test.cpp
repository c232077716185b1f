// tests/parallel/ddp_test.cpp — DistributedDataParallel is single-device training, split: N ranks
// with batch b each end with the same parameters as one process with batch N·b after k steps.
// Models and data are float64, so the tolerance can be tight: 1e-10 absolute + 1e-8 relative
// (what remains is the rounding of sums taken in another order; in float32, Adam's division by
// sqrt(v) magnifies it to ~1e-4 on parameters whose gradients are near zero).
// Ranks start from different random weights, so the broadcast of rank 0's is tested too.
#include <tandem/parallel/ddp/bucket_plan.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>

#include "data/temp_dir.h"
#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;
using tandem::testing::read_doubles;
using tandem::testing::write_doubles;

constexpr int64_t kBatch = 8;  // per rank
constexpr int kDdpSteps = 3;

struct Recipe {
  bool adam = false;
  int accumulate = 1;  // micro-batches per step (no_sync on all but the last)
  bool find_unused = false;
  // Each micro-batch's backward defers its Linear weight gradients; they run after the last one
  // (autograd/deferred_weight_grads.h), and DDP's all-reduce waits for them.
  bool defer_weight_grads = false;
  std::string backend;  // empty: the default (shared memory on this host)
};

// Trains `model` for kDdpSteps on its share (rows rank·per_rank onwards) of each global batch of
// world × kBatch examples: `step_fn(x, y, last)` runs forward + backward for one micro-batch.
template <typename M, typename Step>
void train(M& model, int world, int rank, int64_t per_rank, const Recipe& r, Step&& step_fn) {
  auto [x32, y] = tandem::testing::synthetic_data(kDdpSteps * r.accumulate * world * kBatch);
  const Tensor x = x32.to(kFloat64);
  auto opt = tandem::testing::make_optimizer(model, r.adam);
  int64_t start = 0;
  for (int s = 0; s < kDdpSteps; ++s) {
    opt->zero_grad();
    for (int m = 0; m < r.accumulate; ++m) {
      const int64_t offset = start + rank * per_rank;
      step_fn(x.narrow(0, offset, per_rank), y.narrow(0, offset, per_rank), m + 1 == r.accumulate);
      start += world * kBatch;
    }
    opt->step();
  }
}

template <typename M>
std::vector<double> single_device(const Recipe& r, int world) {
  manual_seed(0);
  M model;
  model.to(kFloat64);
  train(model, world, 0, world * kBatch, r, [&](const Tensor& x, const Tensor& y, bool) {
    cross_entropy(model.forward(x), y).backward();
  });
  return tandem::testing::flat_params(model);
}

template <typename M>
std::vector<double> distributed(const Recipe& r, int world) {
  tandem::testing::TempDir dir;
  const std::string out = dir.file("params.bin");
  spawn(
      [&](int rank) {
        init_process_group({.backend = r.backend, .timeout = 60s});
        manual_seed(100 + rank);  // different weights per rank: DDP must copy rank 0's
        if (rank == 0) manual_seed(0);
        M model;
        model.to(kFloat64);
        DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.05,
                                            .first_bucket_mb = 0.01,
                                            .find_unused_parameters = r.find_unused});
        autograd::DeferredWeightGrads deferred;
        auto backward = [&](const Tensor& loss, bool last) {
          if (!r.defer_weight_grads) return loss.backward();
          deferred.append(autograd::backward(loss, {.defer_weight_grads = true}));
          if (last) deferred.run();  // every weight gradient, then DDP's all-reduce
        };
        train(model, world, rank, kBatch, r, [&](const Tensor& x, const Tensor& y, bool last) {
          if (last) {
            backward(cross_entropy(ddp(x), y), true);
          } else {
            auto guard = ddp.no_sync();
            backward(cross_entropy(ddp(x), y), false);
          }
        });
        if (rank == 0) write_doubles(out, tandem::testing::flat_params(model));
        destroy_process_group();
      },
      world);
  return read_doubles(out);
}

void expect_same_as_reference(const std::vector<double>& a, const std::vector<double>& b) {
  tandem::testing::expect_same_params(a, b);
}

TEST(DDP, TwoRanksTrainTheMlpAsOneDeviceWithTheFullBatch) {
  expect_same_as_reference(distributed<tandem::testing::Mlp>({}, 2),
                           single_device<tandem::testing::Mlp>({}, 2));
}

TEST(DDP, TwoRanksOverGlooTrainTheMlpAsOneDevice) {
  const Recipe r{.adam = true, .backend = "gloo"};
  expect_same_as_reference(distributed<tandem::testing::Mlp>(r, 2),
                           single_device<tandem::testing::Mlp>(r, 2));
}

// Over shared memory each bucket is reduced where its gradients lie (all_reduce_coalesced): a
// step holds the gradients and no bucket buffer. Over Gloo the gradients are packed into buffers
// as large again. (The tests above check the averages over both.)
TEST(DDP, OverSharedMemoryAStepHoldsNoBucketBuffer) {
  tandem::testing::TempDir dir;
  for (const std::string backend : {"shm", "gloo"}) {
    const std::string out = dir.file(backend + ".bin");
    spawn(
        [&](int rank) {
          init_process_group({.backend = backend, .timeout = 60s});
          tandem::testing::Mlp model;
          model.to(kFloat64);
          const Device cpu = Device::cpu();
          const int64_t before = memory_stats(cpu).allocated_bytes;
          {
            DistributedDataParallel ddp(model);
            const Tensor x = randn({kBatch, 784}, {.dtype = kFloat64});
            cross_entropy(ddp(x), zeros({kBatch}, {.dtype = kInt64})).backward();
            if (rank == 0)
              write_doubles(out, {double(memory_stats(cpu).allocated_bytes - before),
                                  double(ddp.reducer().reduces_in_place())});
          }
          destroy_process_group();
        },
        2);
  }
  tandem::testing::Mlp mlp;
  const double grads = double(tandem::testing::flat_params(mlp).size() * sizeof(double));
  const std::vector<double> shm_run = read_doubles(dir.file("shm.bin"));
  const std::vector<double> gloo_run = read_doubles(dir.file("gloo.bin"));
  EXPECT_EQ(shm_run[1], 1.0) << "over shm, the reducer should still reduce in place";
  EXPECT_EQ(gloo_run[1], 0.0) << "Gloo has no all_reduce_coalesced: the reducer packs";
  const double shm = shm_run[0], gloo = gloo_run[0];
  EXPECT_LT(shm, 1.25 * grads) << "held after a step over shm, against gradients of " << grads;
  EXPECT_GT(gloo, 1.75 * grads) << "held after a step over Gloo, against gradients of " << grads;
}

TEST(DDP, ThreeRanksTrainTheMlpAsOneDeviceWithAdam) {
  const Recipe r{.adam = true};
  expect_same_as_reference(distributed<tandem::testing::Mlp>(r, 3),
                           single_device<tandem::testing::Mlp>(r, 3));
}

TEST(DDP, TwoRanksTrainTheCnnAsOneDevice) {
  const Recipe r{.adam = true};
  expect_same_as_reference(distributed<tandem::testing::Cnn>(r, 2),
                           single_device<tandem::testing::Cnn>(r, 2));
}

TEST(DDP, ThreeRanksTrainTheCnnAsOneDevice) {
  expect_same_as_reference(distributed<tandem::testing::Cnn>({}, 3),
                           single_device<tandem::testing::Cnn>({}, 3));
}

// Under DDP the checkpointed layers' gradient hooks fire once each (no inner backward), the
// buckets all-reduce during backward, and 2 ranks train as one device.
TEST(DDP, ActivationCheckpointingTrainsAsOneDevice) {
  expect_same_as_reference(distributed<tandem::testing::CheckpointedMlp>({}, 2),
                           single_device<tandem::testing::Mlp>({}, 2));
  expect_same_as_reference(distributed<tandem::testing::CheckpointedMlp>({.adam = true}, 2),
                           single_device<tandem::testing::Mlp>({.adam = true}, 2));
}

TEST(DDP, NoSyncAccumulatesLikeOneDevice) {
  const Recipe r{.accumulate = 2};
  expect_same_as_reference(distributed<tandem::testing::Mlp>(r, 2),
                           single_device<tandem::testing::Mlp>(r, 2));
}

// DDP's gradient hooks fire when the deferred weight gradients arrive, and its end-of-backward
// all-reduce waits for them: with accumulation, the W of both micro-batches runs once.
TEST(DDP, DeferredWeightGradientsTrainAsOneDevice) {
  const Recipe r{.adam = true, .accumulate = 2, .defer_weight_grads = true};
  expect_same_as_reference(distributed<tandem::testing::Mlp>(r, 2),
                           single_device<tandem::testing::Mlp>({.adam = true, .accumulate = 2}, 2));
}

TEST(DDP, UnusedParametersWithFindUnusedMatchOneDevice) {
  const Recipe r{.adam = true, .find_unused = true};
  expect_same_as_reference(distributed<tandem::testing::WithUnused>(r, 2),
                           single_device<tandem::testing::WithUnused>(r, 2));
}

TEST(DDP, UnusedParametersWithoutFindUnusedAreAnErrorNamingThem) {
  tandem::testing::TempDir dir;
  const std::string out = dir.file("msg.txt");
  spawn(
      [&](int rank) {
        init_process_group({.timeout = 60s});
        tandem::testing::WithUnused model;
        DistributedDataParallel ddp(model);
        std::string msg = "no error";
        try {
          cross_entropy(ddp(zeros({4, 1, 28, 28})), zeros({4}, {.dtype = kInt64})).backward();
        } catch (const DistributedError& e) {
          msg = e.what();
        }
        if (rank == 0) tandem::testing::write_bytes(out, msg);
        destroy_process_group();
      },
      2);
  const std::string msg = tandem::testing::read_bytes(out);
  EXPECT_THAT(msg, ::testing::HasSubstr("spare.weight, spare.bias"));
  EXPECT_THAT(msg, ::testing::HasSubstr("find_unused_parameters"));
}

// A backward that throws part-way (here a hook on the input, after the parameters' buckets went
// out) never reaches DDP's end-of-backward callback; the next forward must wait those buckets
// out and start afresh, not fail with "received a second gradient" for ever after.
TEST(DDP, AFailedBackwardDoesNotBreakTheNextStep) {
  tandem::testing::TempDir dir;
  spawn(
      [&](int rank) {
        init_process_group({.timeout = 60s});
        tandem::testing::Mlp model;
        DistributedDataParallel ddp(model);
        const Tensor y = zeros({4}, {.dtype = kInt64});
        Tensor x = randn({4, 1, 28, 28}).requires_grad_();
        x.register_hook(
            [](const Tensor&) -> Tensor { throw ValueError("hook failed on purpose"); });
        std::string msg = "first backward did not throw";
        try {
          cross_entropy(ddp(x), y).backward();
        } catch (const ValueError&) {
          msg = "ok";
        }
        try {
          model.zero_grad();
          cross_entropy(ddp(randn({4, 1, 28, 28})), y).backward();
        } catch (const Error& e) {
          msg = std::string("second step failed: ") + e.what();
        }
        tandem::testing::write_bytes(dir.file("rank" + std::to_string(rank)), msg);
        destroy_process_group();
      },
      2);
  EXPECT_EQ(tandem::testing::read_bytes(dir.file("rank0")), "ok");
  EXPECT_EQ(tandem::testing::read_bytes(dir.file("rank1")), "ok");
}

// A hook on the output runs a second backward inside the first: an auxiliary loss that is the only
// one to reach `side`. Its parameters' DDP hooks fire first, inside the inner pass; DDP's
// end-of-backward callback must still run once, at the end of the outer pass, when `fc` has its
// gradient too (with a callback list per pass it ran after the inner one and failed with
// "backward produced no gradient for fc.weight").
template <typename Forward>
void step_with_nested_backward(tandem::testing::WithAuxiliary& model, Forward&& forward,
                               const Tensor& x, const Tensor& y) {
  Tensor out = forward(x);
  out.register_hook([&model, x](const Tensor&) {
    EnableGradGuard grad;  // hooks run under no-grad, as the rest of backward
    Tensor s = model.side(x.flatten(1));
    mse_loss(s, zeros(s.shape(), s.options())).backward();
    return Tensor();
  });
  cross_entropy(out, y).backward();
}

TEST(DDP, ABackwardInsideBackwardFinalizesOnceAtTheEndAndMatchesOneDevice) {
  using tandem::testing::WithAuxiliary;
  const Recipe r;
  constexpr int kWorld = 2;
  // The ranks first: a process may not fork once its thread pool runs (TSan refuses it).
  tandem::testing::TempDir dir;
  const std::string out = dir.file("params.bin");
  spawn(
      [&](int rank) {
        init_process_group({.timeout = 60s});
        manual_seed(0);
        WithAuxiliary model;
        model.to(kFloat64);
        DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.01, .first_bucket_mb = 0.01});
        train(model, kWorld, rank, kBatch, r, [&](const Tensor& x, const Tensor& y, bool) {
          step_with_nested_backward(
              model, [&](const Tensor& t) { return ddp(t); }, x, y);
        });
        if (rank == 0) write_doubles(out, tandem::testing::flat_params(model));
        destroy_process_group();
      },
      kWorld);
  manual_seed(0);
  WithAuxiliary single;
  single.to(kFloat64);
  train(single, kWorld, 0, kWorld * kBatch, r, [&](const Tensor& x, const Tensor& y, bool) {
    step_with_nested_backward(
        single, [&](const Tensor& t) { return single.forward(t); }, x, y);
  });
  expect_same_as_reference(read_doubles(out), tandem::testing::flat_params(single));
}

TEST(DDP, DifferentModelsOnTheRanksAreAnErrorSayingWhatDiffers) {
  tandem::testing::TempDir dir;
  const std::string out = dir.file("msg.txt");
  spawn(
      [&](int rank) {
        init_process_group({.timeout = 60s});
        std::string msg = "no error";
        try {
          if (rank == 0) {
            tandem::testing::Mlp m;
            DistributedDataParallel ddp(m);
          } else {
            tandem::testing::Cnn m;
            DistributedDataParallel ddp(m);
          }
        } catch (const DistributedError& e) {
          msg = e.what();
        }
        if (rank == 1) tandem::testing::write_bytes(out, msg);
        destroy_process_group();
      },
      2);
  const std::string msg = tandem::testing::read_bytes(out);
  EXPECT_THAT(msg, ::testing::HasSubstr("rank 1's model differs from rank 0's"));
  EXPECT_THAT(msg, ::testing::HasSubstr("fc1.weight [64, 784]"));
}

TEST(BucketPlan, ReverseOrderFirstBucketSmallThenCapped) {
  // Four parameters of 1 KiB, 2 KiB, 3 KiB, 4 KiB (floats), caps: first 4 KiB, then 5 KiB.
  std::vector<Tensor> ps{zeros({256}), zeros({512}), zeros({768}), zeros({1024})};
  const auto plan = plan_buckets(ps, {.bucket_cap_bytes = 5 << 10, .first_bucket_bytes = 4 << 10});
  EXPECT_EQ(plan, (std::vector<std::vector<size_t>>{{3}, {2, 1}, {0}}));
  const auto big = plan_buckets(ps, {.bucket_cap_bytes = 1 << 10, .first_bucket_bytes = 1 << 10});
  EXPECT_EQ(big.size(), 4u) << "a parameter over the cap gets a bucket of its own";
}

}  // namespace
}  // namespace tandem::parallel
