// The intra-op pool: results do not depend on the thread count, and errors inside tasks surface.
#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include <tandem/core/thread_pool.h>
#include "support/expect.h"

using namespace tandem;
using tandem::testing::values;

TEST(ThreadPool, ResultsAreIndependentOfTheThreadCount) {
  manual_seed(5);
  Tensor a = randn({512, 700}), b = randn({700, 300});
  set_num_threads(1);
  const auto serial = std::make_tuple(values(a.matmul(b)), values((a * 3.0).exp()),
                                      values(a.sum({1})), values(randn({100000})));
  manual_seed(5);
  a = randn({512, 700});
  b = randn({700, 300});
  set_num_threads(2);
  EXPECT_EQ(get_num_threads(), 2);
  EXPECT_EQ(values((a * 3.0).exp()), std::get<1>(serial));
  const std::vector<double> mm = values(a.matmul(b));
  for (size_t i = 0; i < mm.size(); ++i) ASSERT_NEAR(mm[i], std::get<0>(serial)[i], 1e-3);
  const std::vector<double> rs = values(a.sum({1}));
  for (size_t i = 0; i < rs.size(); ++i) ASSERT_NEAR(rs[i], std::get<2>(serial)[i], 1e-3);
  EXPECT_EQ(values(randn({100000})), std::get<3>(serial));  // random numbers too
}

TEST(ThreadPool, ParallelForCoversTheRangeOnceAndRethrows) {
  set_num_threads(2);
  std::vector<std::atomic<int>> hits(100000);
  detail::parallel_for(0, 100000, 1000, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) hits[size_t(i)]++;
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_THROW(detail::parallel_for(0, 100000, 1000,
                                    [](int64_t lo, int64_t) {
                                      if (lo > 0) throw ValueError("boom");
                                    }),
               ValueError);
  EXPECT_THROW(set_num_threads(0), ValueError);
}

// Large products go to BLAS directly (gemm_util.h), split over the pool by rows or by columns of
// the result: every transpose layout, both split directions and 1–3 threads, against a plain
// triple loop in double precision.
TEST(ThreadPool, SplitProductsMatchTheDefinitionInEveryLayout) {
  manual_seed(9);
  for (const auto& [m, k, n] : {std::array<int64_t, 3>{200, 90, 70}, {60, 110, 230}}) {
    Tensor a = randn({m, k}, {.dtype = kFloat64}), b = randn({k, n}, {.dtype = kFloat64});
    const std::vector<double> va = values(a), vb = values(b);
    std::vector<double> ref(size_t(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p)
          ref[size_t(i * n + j)] += va[size_t(i * k + p)] * vb[size_t(p * n + j)];
    // Transposed operands are passed as transposed views of contiguous tensors (no copy).
    const Tensor at = a.t().contiguous(), bt = b.t().contiguous();
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      for (int layout = 0; layout < 4; ++layout) {
        const Tensor lhs = layout & 1 ? at.t() : a, rhs = layout & 2 ? bt.t() : b;
        const std::vector<double> got = values(lhs.matmul(rhs));
        ASSERT_EQ(got.size(), ref.size());
        for (size_t i = 0; i < ref.size(); ++i)
          ASSERT_NEAR(got[i], ref[i], 1e-9)
              << "threads " << threads << " layout " << layout << " at " << i;
      }
    }
  }
  set_num_threads(2);
}

// TANDEM_SPIN_US is read when a pool is built, on the caller's thread: a bad value is a
// ValueError naming the variable, not an exception that escapes a worker and aborts the process.
TEST(ThreadPool, ABadSpinTimeIsAValueErrorNamingTheVariable) {
  ::setenv("TANDEM_SPIN_US", "soon", 1);
  const std::string msg = tandem::testing::error_message<ValueError>([] { set_num_threads(2); });
  ::unsetenv("TANDEM_SPIN_US");
  EXPECT_THAT(msg, ::testing::HasSubstr("TANDEM_SPIN_US"));
  set_num_threads(2);
  EXPECT_EQ(values(ones({3}).sum()), std::vector<double>{3});
}

// Two threads running parallel_for at once (two devices' backward threads) both get pool workers:
// neither runs serially while the other holds every thread. Each chunk sleeps, so the workers have
// time to spread; the threads each job saw are counted.
TEST(ThreadPool, ConcurrentCallersShareTheThreads) {
  set_num_threads(4);
  std::barrier start(2);
  auto run = [&](std::set<std::thread::id>& seen) {
    std::mutex mu;
    start.arrive_and_wait();
    detail::parallel_for(0, 40, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::lock_guard lk(mu);
      seen.insert(std::this_thread::get_id());
    });
  };
  std::set<std::thread::id> a, b;
  std::thread ta(run, std::ref(a)), tb(run, std::ref(b));
  ta.join();
  tb.join();
  set_num_threads(int(std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_GE(a.size(), 2u) << "the first caller got no pool worker";
  EXPECT_GE(b.size(), 2u) << "the second caller got no pool worker";
}

// IntraOpThreadsGuard: a cap of 1 keeps a kernel on its caller (the workers stay asleep), a cap
// of 2 of 4 lets in at most one worker, caps only ever lower, and the result is the same bits.
TEST(ThreadPool, IntraOpThreadsGuardCapsTheThreadsOfItsThreadOnly) {
  set_num_threads(4);
  auto threads_used = [] {
    std::mutex mu;
    std::set<std::thread::id> seen;
    detail::parallel_for(0, 40, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::lock_guard lk(mu);
      seen.insert(std::this_thread::get_id());
    });
    return seen;
  };
  manual_seed(3);
  const Tensor a = randn({300, 400}), b = randn({400, 200});
  const std::vector<double> full = values(a.matmul(b).sum({1}));
  EXPECT_EQ(intra_op_threads(), 4);
  {
    IntraOpThreadsGuard one(1);
    EXPECT_EQ(intra_op_threads(), 1);
    EXPECT_EQ(threads_used(), std::set<std::thread::id>{std::this_thread::get_id()});
    EXPECT_EQ(values(a.matmul(b).sum({1})), full);  // the same chunks, so the same bits
    {
      IntraOpThreadsGuard more(3);  // does not raise the cap
      EXPECT_EQ(intra_op_threads(), 1);
    }
    std::thread other([&] { EXPECT_EQ(intra_op_threads(), 4) << "the cap is per thread"; });
    other.join();
  }
  {
    IntraOpThreadsGuard two(2);
    EXPECT_LE(threads_used().size(), 2u);
    EXPECT_EQ(values(a.matmul(b).sum({1})), full);
  }
  EXPECT_EQ(intra_op_threads(), 4);
  EXPECT_THROW(IntraOpThreadsGuard(0), ValueError);
  set_num_threads(int(std::max(1u, std::thread::hardware_concurrency())));
}
