// tests/autograd/reduce_16bit_test.cpp — reductions of bfloat16 and float16 tensors read them in
// place and reduce in float: each result equals the float32 copy's reduction rounded once, bit for
// bit, for sum, mean, max, min and argmax over rows and over columns, at shapes that take each of
// the kernels' paths (short rows, long rows, a few rows long enough to split, many columns, a few
// columns long enough to split). On the CPU and on cuda:0 (skipped visibly without a GPU).
#include "support/low_precision_case.h"

using namespace tandem;
using tandem::testing::all_close;

namespace reduce_16bit_test {

class Reduce16Bit : public tandem::testing::LowPrecisionOnDevice {};

// [rows, cols] shapes: reduced over dim 1 they are rows of `cols` elements, over dim 0 columns
// of `rows` elements.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {
    {64, 100},     // short rows (a warp each), many columns
    {48, 3000},    // long rows (a block each)
    {2, 200000},   // a few very long rows: split across blocks, then the partials
    {20000, 7},    // a few very long columns: split
    {3000, 2304},  // a Linear's bias gradient: tokens × features
};

TEST_P(Reduce16Bit, EqualsTheFloat32CopyReducedThenRoundedOnce) {
  const DType low = GetParam().low;
  manual_seed(3);
  for (const auto& [rows, cols] : kShapes) {
    const Tensor x =
        (randn({rows, cols}) * 2.0 + 0.01).to(low).to(device());  // float16 sums in range
    const Tensor wide = x.to(kFloat32);
    for (int64_t dim : {0, 1}) {
      const std::string where =
          std::to_string(rows) + "x" + std::to_string(cols) + " dim " + std::to_string(dim) + ": ";
      const std::vector<std::pair<const char*, std::pair<Tensor, Tensor>>> results = {
          {"sum", {x.sum({dim}), wide.sum({dim})}},
          {"mean", {x.mean({dim}), wide.mean({dim})}},
          {"max", {x.max(dim), wide.max(dim)}},
          {"min", {x.min(dim), wide.min(dim)}},
      };
      for (const auto& [op, r] : results) {
        ASSERT_EQ(r.first.dtype(), low) << where << op;
        EXPECT_TRUE(all_close(r.first.to(Device::cpu()), r.second.to(low).to(Device::cpu()), 0, 0))
            << where << op;
      }
      EXPECT_TRUE(
          all_close(x.argmax(dim).to(Device::cpu()), wide.argmax(dim).to(Device::cpu()), 0, 0))
          << where << "argmax";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Reduce16Bit, tandem::testing::low_precision_cases(),
                         tandem::testing::low_precision_case_name);

}  // namespace reduce_16bit_test
