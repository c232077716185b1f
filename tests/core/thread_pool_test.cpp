// The intra-op pool: results do not depend on the thread count, and errors inside tasks surface.
#include <atomic>

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
