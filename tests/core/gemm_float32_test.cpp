// float32 matrix products large enough for oneDNN where it has its fast kernels
// (kernels/cpu/gemm_onednn.cpp; OpenBLAS elsewhere): every transpose layout, batched, a shared
// 2-D operand on either side, one row and an odd row count, on 1 and 2 threads (a batch split by
// entries, one matrix by rows), against the same product in float64. A wrong block offset or
// stride gives errors of the size of the entries, far above float32's rounding.
#include <tandem/core/kernels/kernels.h>
#include <cmath>

#include "support/expect.h"

using namespace tandem;

namespace {

struct Case {
  const char* name;
  Shape a, b;
  bool ta, tb;
};

TEST(GemmFloat32, MatchesFloat64OnEveryLayoutAndThreadCount) {
  const Case cases[] = {
      {"a.b", {96, 256}, {256, 300}, false, false},  // 7.4 M multiply-adds
      {"a.bT", {96, 256}, {300, 256}, false, true},  // a linear layer's forward
      {"aT.b", {256, 96}, {256, 300}, true, false},  // its weight gradient
      {"aT.bT", {256, 96}, {300, 256}, true, true},
      {"batched", {5, 64, 128}, {5, 128, 80}, false, false},
      {"shared b", {5, 64, 128}, {128, 80}, false, false},
      {"shared a", {64, 128}, {5, 128, 80}, false, false},
      {"one row", {1, 512}, {512, 2100}, false, false},
      {"odd rows", {33, 300}, {301, 300}, false, true},
  };
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& c : cases) {
      manual_seed(12);
      const Tensor a = randn(c.a), b = randn(c.b);
      auto op = [&](const Tensor& x, bool t) { return t ? x.transpose(-2, -1) : x; };
      const Tensor ref = op(a.to(kFloat64), c.ta).matmul(op(b.to(kFloat64), c.tb));
      const Tensor got = op(a, c.ta).matmul(op(b, c.tb));
      ASSERT_EQ(got.shape(), ref.shape()) << c.name;
      // Entries are sums of K unit-normal products (size ~sqrt(K)); float32 keeps ~1e-6 of that.
      const double k = double(c.ta ? c.a.end()[-2] : c.a.back());
      EXPECT_TRUE(tandem::testing::all_close(got.to(kFloat64), ref, 1e-5 * std::sqrt(k), 1e-5))
          << c.name << ", " << threads << " thread(s), path: " << cpu_gemm_path(kFloat32);
    }
  }
  set_num_threads(saved);
}

// A product is split into one block per thread the caller may use (intra_op_threads()), so a
// thread capped at one (a pipeline stage, a DataParallel replica) runs it whole. Blocks of rows
// or columns change no element's sum: the bits are the same whatever the cap.
TEST(GemmThreads, SameBitsWhateverTheCap) {
  const int saved = get_num_threads();
  set_num_threads(2);
  const Case cases[] = {
      {"a.bT", {64, 512}, {512, 512}, false, true},       // oneDNN (float32), split by rows
      {"aT.b", {512, 64}, {512, 512}, true, false},       // split by rows of a transposed a
      {"aT.b odd", {512, 37}, {512, 512}, true, false},   // 18 + 19 rows of a transposed a
      {"a.b wide", {20, 300}, {300, 900}, false, false},  // BLAS splits its columns
      {"batched", {6, 64, 128}, {6, 128, 80}, false, false},
      {"odd rows", {33, 300}, {301, 300}, false, true},  // blocks of 16 and 17 rows
  };
  for (DType dtype : {kFloat32, kFloat64})
    for (const Case& c : cases) {
      manual_seed(13);
      const Tensor a = randn(c.a, {.dtype = dtype}), b = randn(c.b, {.dtype = dtype});
      auto op = [&](const Tensor& x, bool t) { return t ? x.transpose(-2, -1) : x; };
      const Tensor two = op(a, c.ta).matmul(op(b, c.tb));
      IntraOpThreadsGuard one(1);
      const Tensor capped = op(a, c.ta).matmul(op(b, c.tb));
      EXPECT_EQ(two.to_vector<double>(), capped.to_vector<double>())
          << c.name << " " << name(dtype);
    }
  set_num_threads(saved);
}

}  // namespace
