// tests/parallel/thread_comm_test.cpp — the in-process communicator: ranks that are threads, one
// per virtual device. The collective suite with 1 to 4 ranks; reductions that give every rank the
// same bits, in rank order; a failing rank named at once; mismatched calls and late ranks named;
// and DDP over threads on cpu:0 and cpu:1, which trains as one device.
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>

#include "parallel/collective_suite.h"
#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;
using tandem::testing::require;

class ThreadCollectives : public ::testing::TestWithParam<int> {};

TEST_P(ThreadCollectives, PassTheCollectiveSuite) {
  spawn_threads(
      [](std::shared_ptr<Communicator> group) {
        require(group->backend() == "threads", "backend");
        tandem::testing::check_collectives(*group);
        require(tandem::testing::check_coalesced(*group), "all_reduce_coalesced on threads");
        require(tandem::testing::check_scatter_gather_in_place(*group), "in place on threads");
      },
      GetParam());
}

INSTANTIATE_TEST_SUITE_P(Ranks, ThreadCollectives, ::testing::Values(1, 2, 3, 4));

TEST(ThreadCollectives, ReduceInRankOrderSoEveryRankAndRunGetsTheSameBits) {
  constexpr int kRanks = 3;
  manual_seed(7);
  std::vector<Tensor> inputs;
  for (int r = 0; r < kRanks; ++r) inputs.push_back(randn({10'001}) * std::pow(10.0, r * 3));
  Tensor expected = inputs[0].clone();
  for (int r = 1; r < kRanks; ++r) expected.add_(inputs[r]);  // float32, rank order
  for (int run = 0; run < 3; ++run) {
    std::vector<Tensor> results(kRanks);
    spawn_threads(
        [&](std::shared_ptr<Communicator> group) {
          const int r = group->rank();
          Tensor t = inputs[size_t(r)].to(Device::cpu(r)).clone();  // cpu:0 is cpu: no copy
          group->all_reduce(t)->wait();
          results[size_t(r)] = t.to(Device::cpu());
        },
        kRanks);
    for (int r = 0; r < kRanks; ++r)
      EXPECT_EQ(results[size_t(r)].to_vector<float>(), expected.to_vector<float>())
          << "rank " << r << ", run " << run;
  }
}

TEST(ThreadCollectives, ARankThatThrowsIsNamedAndTheOthersStopWaitingAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  std::string rank0_saw;
  const std::string msg = tandem::testing::error_message<DistributedError>([&] {
    spawn_threads(
        [&](std::shared_ptr<Communicator> group) {
          if (group->rank() == 1) throw ValueError("the data of rank 1 is missing");
          Tensor t = ones({4});
          try {
            group->all_reduce(t)->wait();
          } catch (const DistributedError& e) {
            rank0_saw = e.what();
            throw;
          }
        },
        2, {.timeout = 60s});
  });
  EXPECT_THAT(msg, ::testing::HasSubstr("rank 1 of 2 failed: the data of rank 1 is missing"));
  EXPECT_THAT(rank0_saw, ::testing::HasSubstr("all_reduce #0"));
  EXPECT_THAT(rank0_saw, ::testing::HasSubstr("rank 1 failed"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "not the 60 s timeout";
}

TEST(ThreadCollectives, MismatchedCallsNameBothRanksAndLateRanksAreNamed) {
  const std::string mismatch = tandem::testing::error_message<DistributedError>([] {
    spawn_threads(
        [](std::shared_ptr<Communicator> group) {
          Tensor t = ones({4 + group->rank()});
          group->all_reduce(t)->wait();
        },
        2, {.timeout = 10s});
  });
  EXPECT_THAT(mismatch, ::testing::HasSubstr("all_reduce sum [4] float32"));
  EXPECT_THAT(mismatch, ::testing::HasSubstr("all_reduce sum [5] float32"));
  const std::string late = tandem::testing::error_message<DistributedError>([] {
    spawn_threads(
        [](std::shared_ptr<Communicator> group) {
          if (group->rank() == 1) return;  // never joins
          group->barrier()->wait();
        },
        2, {.timeout = 300ms});
  });
  EXPECT_THAT(late, ::testing::HasSubstr("barrier #0"));
  EXPECT_THAT(late, ::testing::HasSubstr("rank 1 did not arrive"));
}

// Every communicator counts what it sends by the ring algorithms' rule (CommStats).
TEST(ThreadCollectives, CountCallsAndBytesOnTheWire) {
  std::vector<CommStats> stats(2);
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        Tensor t = ones({1000});
        group->all_reduce(t)->wait();  // 2·(n-1)/n · 4000 bytes = 4000
        group->all_reduce(t)->wait();
        std::vector<Tensor> outs{zeros({10}), zeros({10})};
        group->all_gather(outs, ones({10}))->wait();  // (n-1) · 40 = 40
        group->barrier()->wait();
        stats[size_t(group->rank())] = group->stats();
      },
      2);
  for (const CommStats& s : stats) {
    EXPECT_EQ(s.ops.at("all_reduce").calls, 2u);
    EXPECT_EQ(s.ops.at("all_reduce").bytes, 8000u);
    EXPECT_EQ(s.ops.at("all_gather").bytes, 40u);
    EXPECT_EQ(s.ops.at("barrier").bytes, 0u);
    EXPECT_EQ(s.total_bytes(), 8040u);
    EXPECT_EQ(s.str(), "all_gather 1 calls 40 B, all_reduce 2 calls 8.00 kB, barrier 1 calls 0 B");
  }
}

// Two ranks on cpu:0 and cpu:1 train the MLP (float64) with DDP over threads; one device trains
// it on the whole batch. The same tolerance as the process tests (ddp_test.cpp).
TEST(ThreadCollectives, DdpOverThreadsTrainsAsOneDevice) {
  constexpr int kWorld = 2, kBatch = 8, kSteps = 3;
  const auto data = tandem::testing::synthetic_data(kSteps * kWorld * kBatch);
  // Not a structured binding: clang does not let lambdas capture those.
  const Tensor x = data.first.to(kFloat64), y = data.second;
  manual_seed(0);
  tandem::testing::Mlp reference;
  reference.to(kFloat64);
  {
    auto opt = tandem::testing::make_optimizer(reference, false);
    for (int s = 0; s < kSteps; ++s) {
      opt->zero_grad();
      const int64_t at = int64_t(s) * kWorld * kBatch;
      cross_entropy(reference.forward(x.narrow(0, at, kWorld * kBatch)),
                    y.narrow(0, at, kWorld * kBatch))
          .backward();
      opt->step();
    }
  }
  std::vector<std::unique_ptr<tandem::testing::Mlp>> models;
  for (int r = 0; r < kWorld; ++r) {
    manual_seed(r == 0 ? 0 : 100 + r);  // rank 1 starts elsewhere: DDP copies rank 0's weights
    models.push_back(std::make_unique<tandem::testing::Mlp>());
    models.back()->to(kFloat64);
    models.back()->to(Device::cpu(r));
  }
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int r = group->rank();
        const Device dev = Device::cpu(r);
        tandem::testing::Mlp& model = *models[size_t(r)];
        DistributedDataParallel ddp(
            model, {.group = group, .bucket_cap_mb = 0.05, .first_bucket_mb = 0.01});
        auto opt = tandem::testing::make_optimizer(model, false);
        for (int s = 0; s < kSteps; ++s) {
          opt->zero_grad();
          const int64_t at = int64_t(s) * kWorld * kBatch + int64_t(r) * kBatch;
          cross_entropy(ddp(x.narrow(0, at, kBatch).to(dev)), y.narrow(0, at, kBatch).to(dev))
              .backward();
          opt->step();
        }
      },
      kWorld);
  for (int r = 0; r < kWorld; ++r) {
    models[size_t(r)]->to(Device::cpu());
    tandem::testing::expect_same_params(tandem::testing::flat_params(*models[size_t(r)]),
                                        tandem::testing::flat_params(reference));
  }
}

}  // namespace
}  // namespace tandem::parallel
