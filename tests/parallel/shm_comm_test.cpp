// tests/parallel/shm_comm_test.cpp — the shared-memory communicator between real processes: the
// collective suite with buffers small enough that large tensors take many rounds, the default
// choice for CPU ranks on one host, two groups at once, and a peer killed with SIGKILL in the
// middle of an all-reduce: the survivor fails fast naming it, and /dev/shm is left clean; a
// receiver that dies fails its sender's next send the same way.
#include <dirent.h>
#include <tandem/parallel/comm/locality.h>
#include <tandem/parallel/comm/shm_communicator.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>
#include <tandem/parallel/store/hash_store.h>
#include <tandem/parallel/store/prefix_store.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <fstream>
#include <regex>
#include <thread>

#include "data/temp_dir.h"
#include "parallel/collective_suite.h"
#include "parallel/kill_peer.h"
#include "support/expect.h"
#include "support/sanitizer.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;
using tandem::testing::require;

// The shared-memory groups' segments left in /dev/shm ("tandem-<pid>-<8 hex>-<rank>", <pid> the
// process that made it) by processes that are gone: a leak. A live process's are not counted, so
// tests that run beside this one (ctest -j2 starts other shm groups) cannot fail it; other tools,
// the fuzz script among them, keep files of their own there.
std::vector<std::string> tandem_segments() {
  static const std::regex kSegment("tandem-([0-9]+)-[0-9a-f]{8}-[0-9]+");
  std::vector<std::string> names;
  if (DIR* d = ::opendir("/dev/shm")) {
    std::cmatch match;
    while (dirent* e = ::readdir(d))
      if (std::regex_match(e->d_name, match, kSegment) &&
          ::kill(pid_t(std::stol(match[1].str())), 0) != 0 && errno == ESRCH)
        names.push_back(e->d_name);
    ::closedir(d);
  }
  return names;
}

class ShmCollectives : public ::testing::TestWithParam<int> {};

TEST_P(ShmCollectives, PassTheCollectiveSuiteWithManyRoundsPerTensor) {
  const int n = GetParam();
  spawn(
      [n](int rank) {
        auto store = detail::make_store("env://", rank, 60s);
        // 4 KiB buffers: a 20,003-element tensor takes 20-40 rounds (float32, float64), as
        // many as the rounds' edges need; more only cost CI time (3 ranks on 2 cores under the
        // sanitizers took minutes at 100,003). Both all-reduce algorithms, and collectives run
        // by the worker thread as well as inline; under a sanitizer not the mixed choice
        // (direct up to 1 KB), whose two algorithms the other two runs take.
        constexpr int64_t kLarge = 20'003;
        for (size_t direct : {size_t(1024), size_t(0), SIZE_MAX}) {
          if (tandem::testing::kSanitized && direct == 1024) continue;
          ShmCommunicator comm(std::make_shared<PrefixStore>(std::to_string(direct), store), rank,
                               n,
                               {.timeout = 60s,
                                .buffer_bytes = 4096,
                                .direct_bytes = direct,
                                .inline_when_idle = direct != 0});
          tandem::testing::check_collectives(comm, kLarge);
          tandem::testing::require(tandem::testing::check_coalesced(comm, kLarge),
                                   "coalesced on shm");
          tandem::testing::require(tandem::testing::check_scatter_gather_in_place(comm, kLarge),
                                   "reduce-scatter and all-gather in place on shm");
        }
        // The default sizes too: 1.2 MB of float32, 5 rounds of the 256 KiB buffers (10 of
        // float64).
        constexpr int64_t kBig = 300'001;
        ShmCommunicator big(std::make_shared<PrefixStore>("big", store), rank, n, {.timeout = 60s});
        tandem::testing::check_collectives(big, kBig);
        tandem::testing::require(tandem::testing::check_coalesced(big, kBig), "coalesced");
        tandem::testing::require(tandem::testing::check_scatter_gather_in_place(big, kBig),
                                 "in place");
      },
      n);
  EXPECT_TRUE(tandem_segments().empty());
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmCollectives, ::testing::Values(2, 3));

TEST(ShmCollectives, AreTheDefaultForCpuRanksOnOneHostAndTwoGroupsRunAtOnce) {
  spawn(
      [](int rank) {
        auto comm = init_process_group({.timeout = 60s});
        require(comm->backend() == "shm", "the default backend is " + comm->backend());
        // A second group over the same store, used at the same time as the first from another
        // thread: their buffers and step counts are their own.
        ShmCommunicator other(std::make_shared<PrefixStore>("second", default_store()), rank, 2,
                              {.timeout = 60s});
        std::thread t([&] {
          for (int i = 0; i < 50; ++i) {
            Tensor x = full({10'000}, double(rank + i));
            other.all_reduce(x)->wait();
            require(x.to_vector<double>()[9'999] == double(2 * i + 1), "the second group");
          }
        });
        for (int i = 0; i < 50; ++i) {
          Tensor x = full({777}, double(rank * i));
          comm->all_reduce(x, ReduceOp::Max)->wait();
          require(x.to_vector<double>()[0] == double(i), "the first group");
        }
        t.join();
        destroy_process_group();
      },
      2);
}

TEST(ShmCollectives, SameHostIdentityOnEveryRankOfThisMachine) {
  HashStore store;
  EXPECT_TRUE(all_ranks_on_one_host(store, 0, 1));
  store.set("host/1", "another-host 0000 mnt:[1] pid:[1]");
  EXPECT_FALSE(all_ranks_on_one_host(store, 0, 2));
  EXPECT_THAT(host_identity(), ::testing::HasSubstr("mnt:["));
}

TEST(ShmCollectives, APeerKilledMidAllReduceFailsTheOtherFastNamingItAndLeavesNoSegment) {
  const auto r = tandem::testing::kill_rank_1_mid_all_reduce("shm");
  EXPECT_THAT(r.spawn_error, ::testing::HasSubstr("signal 9"));
  EXPECT_THAT(r.error, ::testing::HasSubstr("shm all_reduce #"));
  EXPECT_THAT(r.error, ::testing::ContainsRegex("rank 1 \\(pid [0-9]+\\) died"));
  EXPECT_GE(r.seconds, 0);
  EXPECT_LT(r.seconds, 5) << "a dead peer is seen within milliseconds, not at the 60 s timeout";
  EXPECT_TRUE(tandem_segments().empty()) << "a segment was left in /dev/shm";
}

TEST(ShmCollectives, AReceiverThatDiesFailsItsSendersNextSendNamingIt) {
  spawn(
      [](int rank) {
        // A communicator of its own: the process group's heartbeat would end rank 0 first.
        auto store = detail::make_store("env://", rank, 60s);
        auto g = std::make_shared<ShmCommunicator>(std::make_shared<PrefixStore>("shm", store),
                                                   rank, 2, ShmOptions{.timeout = 60s});
        g->barrier()->wait();
        // Rank 1 leaves once rank 0 is past the barrier too: gone sooner, it could fail the
        // barrier (which also watches its peers), not the send this test is about.
        if (rank == 0) store->set("past-barrier", "1");
        if (rank == 1) {
          store->wait({"past-barrier"});
          ::_exit(0);  // gone, without receiving
        }
        const auto start = std::chrono::steady_clock::now();
        g->send(zeros({1'000'000}), 1)->wait();  // copied: the send completes
        std::string e;
        for (int i = 0; i < 500 && e.empty(); ++i) {  // the sender's thread finds it gone
          std::this_thread::sleep_for(10ms);
          try {
            g->send(ones({1}), 1)->wait();
          } catch (const DistributedError& x) {
            e = x.what();
          }
        }
        require(std::chrono::steady_clock::now() - start < 10s, "seen within seconds");
        require(e.find("shm send to rank 1: rank 1 (pid") != std::string::npos &&
                    e.find(") died") != std::string::npos,
                e);
        ::_exit(0);  // the group's peer is gone: no orderly teardown
      },
      2);
  EXPECT_TRUE(tandem_segments().empty()) << "a segment was left in /dev/shm";
}

TEST(ShmCollectives, RejectBadTensorsNamingTheCall) {
  auto store = std::make_shared<HashStore>();
  ShmCommunicator comm(store, 0, 1, {.timeout = 10s});
  Tensor t = zeros({4, 4}).transpose(0, 1);
  EXPECT_THAT(tandem::testing::error_message<ValueError>([&] { comm.all_reduce(t); }),
              ::testing::HasSubstr("shm all_reduce: expected a contiguous tensor"));
  Tensor out = zeros({3, 2}), in = zeros({3, 3});
  EXPECT_THAT(tandem::testing::error_message<ShapeError>([&] { comm.all_to_all(out, in); }),
              ::testing::HasSubstr("must be shaped like the input"));
  Tensor rows = zeros({3, 2}), fewer = zeros({2, 2});
  EXPECT_THAT(tandem::testing::error_message<ValueError>([&] {
                comm.all_to_all_v(rows, rows, {3, 0}, {3});
              }),
              ::testing::HasSubstr("1 input splits and 2 output splits, for a group of 1"));
  EXPECT_THAT(
      tandem::testing::error_message<ShapeError>([&] { comm.all_to_all_v(fewer, rows, {3}, {3}); }),
      ::testing::HasSubstr("the input splits sum to 3 rows and the output's to 3"));
  EXPECT_THAT(
      tandem::testing::error_message<ValueError>([&] { comm.all_to_all_v(rows, rows, {-1}, {3}); }),
      ::testing::HasSubstr("no split is negative"));
  Tensor one = ones({2});
  EXPECT_THAT(tandem::testing::error_message<ValueError>([&] { comm.send(one, 0); }),
              ::testing::HasSubstr("cannot exchange with rank 0"));
  std::vector<Tensor> none, mixed{ones({2}), ones({2}, {.dtype = kFloat64})}, strided{t};
  EXPECT_THAT(tandem::testing::error_message<ValueError>([&] { comm.all_reduce_coalesced(none); }),
              ::testing::HasSubstr("shm all_reduce_coalesced: no tensors"));
  EXPECT_THAT(tandem::testing::error_message<DTypeError>([&] { comm.all_reduce_coalesced(mixed); }),
              ::testing::HasSubstr("all_reduce_coalesced: tensor 1 is"));
  EXPECT_THAT(
      tandem::testing::error_message<ValueError>([&] { comm.all_reduce_coalesced(strided); }),
      ::testing::HasSubstr("shm all_reduce_coalesced (tensor 0): expected a contiguous tensor"));
  Tensor base = zeros({10});
  std::vector<Tensor> overlapping{base.narrow(0, 6, 4), base.narrow(0, 0, 7)};
  EXPECT_THAT(
      tandem::testing::error_message<ValueError>([&] { comm.all_reduce_coalesced(overlapping); }),
      ::testing::HasSubstr("tensors 0 and 1 overlap in memory"));
  // The reduce-scatter's output may be this rank's chunk of the inputs, and nothing else of them;
  // the all-gather writes, so its tensors must not overlap either.
  std::vector<Tensor> front{base.narrow(0, 0, 4)};
  Tensor shifted = base.narrow(0, 2, 4), short_out = zeros({3});
  EXPECT_THAT(tandem::testing::error_message<ValueError>(
                  [&] { comm.reduce_scatter_coalesced(shifted, front); }),
              ::testing::HasSubstr("the output overlaps input 0 but is not this rank's chunk"));
  EXPECT_THAT(tandem::testing::error_message<ShapeError>(
                  [&] { comm.reduce_scatter_coalesced(short_out, front); }),
              ::testing::HasSubstr("the inputs hold 4 elements, more than 1 chunks"));
  Tensor wide_out = zeros({4}, {.dtype = kFloat64});
  EXPECT_THAT(tandem::testing::error_message<DTypeError>(
                  [&] { comm.reduce_scatter_coalesced(wide_out, front); }),
              ::testing::HasSubstr("one dtype and device"));
  EXPECT_THAT(tandem::testing::error_message<ValueError>(
                  [&] { comm.all_gather_in_place(overlapping, 11); }),
              ::testing::HasSubstr("all_gather_in_place: tensors 0 and 1 overlap"));
  EXPECT_THAT(
      tandem::testing::error_message<ValueError>([&] { comm.all_gather_in_place(front, 3); }),
      ::testing::HasSubstr("hold 4 elements, more than 1 chunks of 3"));
  // One rank alone: every collective is the identity.
  comm.all_reduce(one)->wait();
  EXPECT_EQ(one.to_vector<float>(), std::vector<float>({1, 1}));
  std::vector<Tensor> two{one, full({3}, 2.0)};
  comm.all_reduce_coalesced(two, ReduceOp::Mean)->wait();
  EXPECT_EQ(two[1].to_vector<float>(), std::vector<float>({2, 2, 2}));
}

}  // namespace
}  // namespace tandem::parallel
