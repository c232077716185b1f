// tests/emulated/square_sums_emulated_test.cpp — clip_grad_norm_'s CUDA pass
// (core/kernels/cuda/square_sums.cuh), its very source run on CPU threads by cuda_emulation.h and
// launched as square_sums.cu launches it, against a long double sum and the CPU's kernel: tensors
// empty, shorter than a warp, one element past a chunk and over several chunks, in float32,
// float64, bfloat16 and float16; the same bits on a second run. What it cannot check (the
// hardware) tests/nn/clip_grad_norm_test.cpp's CUDA case checks on a GPU.
#include "emulated/cuda_emulation.h"
// The emulation first: the kernels take CUDA's names from it.
#include <tandem/core/kernels/cuda/square_sums.cuh>

#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/kernels/kernels.h>

#include "support/expect.h"

namespace square_sums_emulated {

using namespace tandem;
using namespace tandem::cuda::squares;

// The sizes: empty, under a warp, a block's stride, one chunk, one past it, several chunks.
const std::vector<int64_t> kSizes = {0, 5, 256, kChunk, kChunk + 1, 3 * kChunk + 77};

// The kernels' sums for tensors of one dtype, launched as square_sums.cu does.
template <typename T>
std::vector<double> emulated(const std::vector<Tensor>& xs) {
  Batch<T> b{};
  int64_t blocks = 0;
  for (const Tensor& x : xs) {
    b.x[b.count] = x.data<T>();
    b.numel[b.count] = x.numel();
    b.first_block[b.count++] = blocks;
    blocks += (x.numel() + kChunk - 1) / kChunk;
  }
  b.first_block[b.count] = blocks;
  std::vector<double> partial(size_t(std::max<int64_t>(blocks, 1)), -1.0);
  std::vector<double> out(xs.size(), -1.0);
  if (blocks > 0)
    emulation::launch(unsigned(blocks), kBlockThreads, kSharedBytes,
                      [&] { square_sum_chunks_kernel<T>(b, partial.data()); });
  emulation::launch(unsigned(b.count), kBlockThreads, kSharedBytes,
                    [&] { square_sum_totals_kernel<T>(b, partial.data(), out.data()); });
  return out;
}

long double exact(const Tensor& x) {
  long double s = 0;
  for (double v : x.to_vector<double>()) s += (long double)v * v;
  return s;
}

class SquareSumsEmulated : public ::testing::TestWithParam<DType> {};

TEST_P(SquareSumsEmulated, MatchLongDoubleSumsAndTheCpuKernelTheSameBitsTwice) {
  const DType dtype = GetParam();
  manual_seed(11);
  std::vector<Tensor> xs;
  for (int64_t n : kSizes) xs.push_back((randn({n}) * 5.0).to(dtype));
  std::vector<double> got, again;
  dispatch<FloatTypesWith16Bit>(dtype, "test", [&]<typename T>() {
    got = emulated<T>(xs);
    again = emulated<T>(xs);
  });
  Tensor cpu = empty({int64_t(xs.size())}, {.dtype = kFloat64});
  kernels(Device::cpu()).square_sums(xs, cpu);
  const std::vector<double> on_cpu = cpu.to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = double(exact(xs[i]));
    // float64 sums of ~10^5 terms: a few units in the last place apart, whatever the order.
    EXPECT_NEAR(got[i], want, 1e-13 * want) << name(dtype) << " size " << kSizes[i];
    EXPECT_NEAR(on_cpu[i], want, 1e-13 * want) << name(dtype) << " size " << kSizes[i];
    EXPECT_EQ(got[i], again[i]) << "not the same bits twice, size " << kSizes[i];
  }
  EXPECT_EQ(got[0], 0.0) << "an empty tensor sums to 0";
  EXPECT_TRUE(emulation::take_violations().empty());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SquareSumsEmulated,
                         ::testing::Values(kFloat32, kFloat64, kBFloat16, kFloat16),
                         [](const auto& info) { return std::string(name(info.param)); });

}  // namespace square_sums_emulated
