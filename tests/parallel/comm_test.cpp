// tests/parallel/comm_test.cpp — Gloo collectives between real processes (2 and 3 ranks through
// parallel::spawn and env:// rendezvous): every op and dtype (bfloat16 and float16 included)
// against values computed by hand,
// sequence numbers, and a peer killed in the middle of an all-reduce.
#include <tandem/parallel/comm/gloo_communicator.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>
#include <tandem/parallel/store/hash_store.h>
#include <tandem/parallel/store/socket.h>
#include <csignal>
#include <fstream>
#include <thread>

#include "data/temp_dir.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;

// gtest assertions do not cross a fork: children check with this and fail by throwing.
void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

bool same(const Tensor& a, const std::vector<double>& expected) {
  const auto got = a.to_vector<double>();
  if (got.size() != expected.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::abs(got[i] - expected[i]) > 1e-6 * (1 + std::abs(expected[i]))) return false;
  return true;
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, MatchValuesComputedByHand) {
  const int n = GetParam();
  spawn(
      [n](int rank) {
        auto comm = init_process_group({.timeout = 60s});
        require(comm->backend() == "gloo" && comm->rank() == rank && comm->size() == n,
                "rank and size");
        const double r = rank;
        const double sum_r = n * (n - 1) / 2.0;
        for (DType dt : {kFloat32, kFloat64, kInt64}) {
          Tensor t = full({5}, r + 1, {.dtype = dt});
          comm->all_reduce(t, ReduceOp::Sum)->wait();
          require(same(t, std::vector<double>(5, sum_r + n)), "all_reduce sum");
          t = full({2, 3}, r, {.dtype = dt});
          comm->all_reduce(t, ReduceOp::Max)->wait();
          require(same(t, std::vector<double>(6, n - 1)), "all_reduce max");
          t = full({3}, r + 2, {.dtype = dt});
          comm->all_reduce(t, ReduceOp::Min)->wait();
          require(same(t, std::vector<double>(3, 2)), "all_reduce min");
        }
        Tensor avg = full({4}, 2 * r, {});
        comm->all_reduce(avg, ReduceOp::Mean)->wait();
        require(same(avg, std::vector<double>(4, 2 * sum_r / n)), "all_reduce avg");

        Tensor b = rank == 1 ? tensor({7, 8, 9}) : zeros({3});
        comm->broadcast(b, 1)->wait();
        require(same(b, {7, 8, 9}), "broadcast from rank 1");

        std::vector<Tensor> outs;
        for (int i = 0; i < n; ++i) outs.push_back(zeros({2}, {.dtype = kFloat64}));
        comm->all_gather(outs, full({2}, r * 10, {.dtype = kFloat64}))->wait();
        for (int i = 0; i < n; ++i)
          require(same(outs[size_t(i)], {i * 10.0, i * 10.0}),
                  "all_gather slot " + std::to_string(i));

        // Input chunk c on rank k holds 100c + k; this rank gets chunk `rank` summed over k.
        Tensor in = empty({n, 2}, {});
        for (int c = 0; c < n; ++c) in.select(0, c).fill_(100.0 * c + r);
        Tensor out = zeros({2});
        comm->reduce_scatter(out, in, ReduceOp::Sum)->wait();
        require(same(out, std::vector<double>(2, 100.0 * rank * n + sum_r)),
                "reduce_scatter: got " + out.str());

        // The 16-bit types: reductions compute in float and round once (these values are exact).
        for (DType dt : {kBFloat16, kFloat16}) {
          const std::string what = str(" (", dt, ")");
          Tensor t = full({5}, r + 1, {.dtype = dt});
          comm->all_reduce(t, ReduceOp::Sum)->wait();
          require(t.dtype() == dt && same(t, std::vector<double>(5, sum_r + n)), "sum" + what);
          t = full({3}, r, {.dtype = dt});
          comm->all_reduce(t, ReduceOp::Max)->wait();
          require(same(t, std::vector<double>(3, n - 1)), "max" + what);
          t = full({4}, 2 * r, {.dtype = dt});
          comm->all_reduce(t, ReduceOp::Mean)->wait();
          require(same(t, std::vector<double>(4, 2 * sum_r / n)), "avg" + what);
          Tensor bc = rank == 1 ? tensor({7, 8, 9}).to(dt) : zeros({3}, {.dtype = dt});
          comm->broadcast(bc, 1)->wait();
          require(same(bc, {7, 8, 9}), "broadcast" + what);
          std::vector<Tensor> gathered;
          for (int i = 0; i < n; ++i) gathered.push_back(zeros({2}, {.dtype = dt}));
          comm->all_gather(gathered, full({2}, r * 10, {.dtype = dt}))->wait();
          for (int i = 0; i < n; ++i)
            require(same(gathered[size_t(i)], {i * 10.0, i * 10.0}), "all_gather" + what);
          Tensor chunks = empty({n, 2}, {.dtype = dt});
          for (int c = 0; c < n; ++c) chunks.select(0, c).fill_(4.0 * c + r);
          Tensor mine = zeros({2}, {.dtype = dt});
          comm->reduce_scatter(mine, chunks, ReduceOp::Sum)->wait();
          require(same(mine, std::vector<double>(2, 4.0 * rank * n + sum_r)),
                  "reduce_scatter" + what);
        }

        // Several collectives in flight at once complete in order, numbered alike on every rank.
        std::vector<Tensor> ts;
        std::vector<WorkPtr> works;
        for (int i = 0; i < 4; ++i) {
          ts.push_back(full({1000}, double(i)));
          works.push_back(comm->all_reduce(ts.back()));
        }
        for (int i = 0; i < 4; ++i) {
          works[size_t(i)]->wait();
          require(same(ts[size_t(i)].narrow(0, 0, 1), {double(i) * n}), "async all_reduce");
        }
        require(works[3]->sequence_number() == works[0]->sequence_number() + 3, "sequence");
        comm->barrier()->wait();
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
        auto comm = init_process_group({.timeout = 30s});
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
  tandem::testing::TempDir dir;
  const std::string report = dir.file("rank0.txt");
  const auto start = std::chrono::steady_clock::now();
  try {
    spawn(
        [&](int rank) {
          auto comm = init_process_group({.timeout = 60s});
          Tensor big = ones({4 << 20});  // 16 MiB: a few ms in flight
          if (rank == 1) {
            comm->all_reduce(big)->wait();
            // Die while a later all-reduce is on the wire.
            std::thread([] {
              std::this_thread::sleep_for(2ms);
              std::raise(SIGKILL);
            }).detach();
            for (;;) comm->all_reduce(big)->wait();
          }
          std::string msg = "no error";
          const auto t0 = std::chrono::steady_clock::now();
          try {
            for (int i = 0; i < 1000; ++i) comm->all_reduce(big)->wait();
          } catch (const DistributedError& e) {
            msg = e.what();
          }
          const double secs =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::ofstream(report) << secs << "\n" << msg;
          std::_Exit(0);  // skip the exit-time goodbye: its peer is gone
        },
        2, {.stop_others_on_failure = false});
    ADD_FAILURE() << "spawn should report rank 1's death";
  } catch (const DistributedError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("rank: 1"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("signal 9"));
  }
  std::ifstream in(report);
  double secs = -1;
  in >> secs;
  const std::string msg(std::istreambuf_iterator<char>(in), {});
  EXPECT_THAT(msg, ::testing::HasSubstr("all_reduce #"));
  EXPECT_THAT(msg, ::testing::HasSubstr("rank 1 has exited or crashed"));
  EXPECT_GE(secs, 0);
  EXPECT_LT(secs, 20) << "well within the 60 s timeout";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 40s);
}

}  // namespace
}  // namespace tandem::parallel
