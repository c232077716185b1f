// tests/parallel/comm_test.cpp — Gloo collectives between real processes (2, 3 and 4 ranks through
// parallel::spawn and env:// rendezvous): the collective suite (collective_suite.h), init
// methods, timeouts that name the collective, and a peer killed in the middle of an all-reduce.
#include <tandem/parallel/comm/gloo_communicator.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>
#include <tandem/parallel/store/hash_store.h>
#include <tandem/parallel/store/socket.h>
#include <csignal>
#include <fstream>
#include <thread>

#include "data/temp_dir.h"
#include "parallel/collective_suite.h"
#include "parallel/kill_peer.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;

using tandem::testing::require;
using tandem::testing::same;

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, PassTheCollectiveSuiteOverGloo) {
  const int n = GetParam();
  spawn(
      [n](int rank) {
        auto comm = init_process_group({.backend = "gloo", .timeout = 60s});
        require(comm->backend() == "gloo" && comm->rank() == rank && comm->size() == n,
                "rank and size");
        tandem::testing::check_collectives(*comm);
        // No coalesced all-reduce over Gloo: null, and the caller (DDP) packs the tensors.
        require(!tandem::testing::check_coalesced(*comm), "Gloo has no all_reduce_coalesced");
        require(!tandem::testing::check_scatter_gather_in_place(*comm), "nor these two");
        destroy_process_group();
      },
      n);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(2, 3, 4));

TEST(ProcessGroup, InitMethodsTcpAndFileWithExplicitRanks) {
  tandem::testing::TempDir dir;
  const int port = detail::free_port("127.0.0.1");
  for (const std::string& method :
       {"tcp://127.0.0.1:" + std::to_string(port), "file://" + dir.file("rendezvous")}) {
    spawn(
        [&](int rank) {
          // No environment needed: rank and world size are given.
          ::unsetenv("RANK");
          ::unsetenv("WORLD_SIZE");
          auto comm = init_process_group(
              {.init_method = method, .rank = rank, .world_size = 2, .timeout = 30s});
          Tensor t = full({3}, double(rank + 1));
          comm->all_reduce(t)->wait();
          require(same(t, {3, 3, 3}), method);
          require(get_rank() == rank && get_world_size() == 2, "get_rank");
          destroy_process_group();
          require(!is_initialized(), "destroyed");
        },
        2);
  }
  EXPECT_THAT(tandem::testing::error_message<ValueError>([] {
                init_process_group({.init_method = "smoke://x", .rank = 0, .world_size = 1});
              }),
              ::testing::HasSubstr("unknown init_method 'smoke://x'"));
  ::unsetenv("MASTER_ADDR");
  EXPECT_THAT(tandem::testing::error_message<ValueError>(
                  [] { init_process_group({.rank = 0, .world_size = 1}); }),
              ::testing::HasSubstr("MASTER_ADDR is not set"));
}

TEST(Collectives, AWaitThatTimesOutNamesTheCollectiveAndItsNumber) {
  tandem::testing::TempDir dir;
  const std::string report = dir.file("msg.txt");
  spawn(
      [&](int rank) {
        auto comm = init_process_group({.backend = "gloo", .timeout = 30s});
        Tensor t = ones({4});
        comm->all_reduce(t)->wait();  // #0 on both ranks
        if (rank == 0) {
          std::string msg = "no timeout";
          try {
            comm->all_reduce(t)->wait(300ms);  // #1: rank 1 never joins it
          } catch (const DistributedError& e) {
            msg = e.what();
          }
          tandem::testing::write_bytes(report, msg);
        } else {
          std::this_thread::sleep_for(1s);  // alive, but not calling all_reduce #1
        }
        std::_Exit(0);  // rank 0's all_reduce #1 is still pending: leave without a goodbye
      },
      2);
  const std::string msg = tandem::testing::read_bytes(report);
  EXPECT_THAT(msg, ::testing::HasSubstr("all_reduce #1"));
  EXPECT_THAT(msg, ::testing::HasSubstr("did not complete within 0.3 s"));
}

TEST(Collectives, RejectNonContiguousAndMismatchedTensors) {
  auto store = std::make_shared<HashStore>();
  GlooCommunicator comm(store, 0, 1, {.timeout = 10s});
  Tensor t = zeros({4, 4}).transpose(0, 1);
  EXPECT_THAT(tandem::testing::error_message<ValueError>([&] { comm.all_reduce(t); }),
              ::testing::HasSubstr("contiguous"));
  std::vector<Tensor> outs{zeros({3})};
  EXPECT_THROW(comm.all_gather(outs, zeros({2})), ShapeError);
  Tensor i = zeros({2}, {.dtype = kInt64});
  EXPECT_THROW(comm.all_reduce(i, ReduceOp::Mean), DTypeError);
  // One ReduceOp for kernels and collectives: argmax is a kernel's, not a collective's.
  Tensor f = zeros({4});
  EXPECT_THAT(
      tandem::testing::error_message<ValueError>([&] { comm.all_reduce(f, ReduceOp::ArgMax); }),
      ::testing::HasSubstr("argmax is a reduction of one tensor"));
}

// Gloo's writes to a dead peer raise SIGPIPE; the communicator blocks it on the threads that
// write instead of changing the process's handling (which belongs to the program).
// A collective writes into its CPU tensors in place: it bumps their version, as every in-place
// write does, so that what remembers a tensor by version (the CPU GEMM's packed weights) sees it.
TEST(Collectives, WritingATensorBumpsItsVersion) {
  auto store = std::make_shared<HashStore>();
  GlooCommunicator comm(store, 0, 1, {.timeout = 10s});
  Tensor t = ones({4});
  for (int i = 0; i < 2; ++i) {
    const uint64_t before = t.version();
    (i == 0 ? comm.all_reduce(t) : comm.broadcast(t, 0))->wait();
    EXPECT_GT(t.version(), before) << (i == 0 ? "all_reduce" : "broadcast");
  }
}

TEST(Collectives, ACommunicatorLeavesTheProcesssSigpipeHandlingAlone) {
  struct sigaction before {
  }, after{};
  sigset_t mask_before, mask_after;
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &before), 0);
  pthread_sigmask(SIG_SETMASK, nullptr, &mask_before);
  {
    auto store = std::make_shared<HashStore>();
    GlooCommunicator comm(store, 0, 1, {.timeout = 10s});
    Tensor t = ones({4});
    comm.all_reduce(t)->wait();
  }
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &after), 0);
  pthread_sigmask(SIG_SETMASK, nullptr, &mask_after);
  EXPECT_EQ(before.sa_handler, after.sa_handler);
  EXPECT_EQ(sigismember(&mask_before, SIGPIPE), sigismember(&mask_after, SIGPIPE));
}

TEST(Collectives, APeerKilledMidAllReduceFailsTheOthersNamingRankAndCollective) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = tandem::testing::kill_rank_1_mid_all_reduce("gloo");
  EXPECT_THAT(r.spawn_error, ::testing::HasSubstr("rank: 1"));
  EXPECT_THAT(r.spawn_error, ::testing::HasSubstr("signal 9"));
  EXPECT_THAT(r.error, ::testing::HasSubstr("all_reduce #"));
  EXPECT_THAT(r.error, ::testing::HasSubstr("rank 1 has exited or crashed"));
  EXPECT_GE(r.seconds, 0);
  EXPECT_LT(r.seconds, 20) << "well within the 60 s timeout";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 40s);
}

}  // namespace
}  // namespace tandem::parallel
