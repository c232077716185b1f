// tests/autograd/cross_entropy_16bit_test.cpp — cross-entropy on 16-bit logits reads them in place:
// under autocast the loss and the logits' gradient are what a float32 copy of the logits gives
// (float32 arithmetic, the gradient rounded once), with label smoothing and ignored rows, while
// the step holds no float32 copy of the logits (peak memory on the CPU); outside autocast a
// 16-bit loss comes back in the logits' dtype. The same on cuda:0 against the CPU, skipped
// visibly without a GPU.
#include <tandem/core/memory_stats.h>

#include "support/low_precision_case.h"

using namespace tandem;
using tandem::testing::all_close;

namespace cross_entropy_16bit_test {

class CrossEntropy16Bit : public tandem::testing::LowPrecisionOnDevice {};

// Logits [rows, classes] drawn in float32 then rounded to `low`, so that the float32 reference
// starts from exactly the same numbers; targets with one ignored row.
struct Problem {
  Tensor logits;  // float32, every value representable in `low`
  Tensor target;  // int64 [rows]
};

Problem draw(DType low, int64_t rows, int64_t classes) {
  manual_seed(7);
  Problem p;
  p.logits = (randn({rows, classes}) * 3.0).to(low).to(kFloat32);
  std::vector<int64_t> t(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) t[size_t(i)] = (i * 7919) % classes;
  t[1] = -100;  // ignore_index
  p.target = from_vector<int64_t>(t, {rows});
  return p;
}

// One unit in the last place of `low`: relative (2^-7 for bfloat16, 2^-10 for float16), and
// absolute below float16's smallest normal (its subnormals are 2^-24 apart).
double ulp_rel(DType low) { return low == kBFloat16 ? 0x1p-7 : 0x1p-10; }
double ulp_abs(DType low) { return low == kBFloat16 ? 0 : 0x1p-24; }

// Loss and the logits' gradient (float32) through a float32 copy: what autocast did before.
std::pair<Tensor, Tensor> reference(const Problem& p, const ClassLossOptions& o) {
  const Tensor x = p.logits.clone().requires_grad_();
  const Tensor loss = cross_entropy(x, p.target, o);
  (o.reduction == Reduction::None ? loss.sum() : loss).backward();
  return {loss.detach(), x.grad()};
}

TEST_P(CrossEntropy16Bit, UnderAutocastEqualsAFloat32CopyOfTheLogits) {
  const DType low = GetParam().low;
  const Problem p = draw(low, 12, 1000);
  for (const ClassLossOptions& o : {ClassLossOptions{}, ClassLossOptions{.label_smoothing = 0.1},
                                    ClassLossOptions{.reduction = Reduction::Sum}}) {
    const auto [ref_loss, ref_grad] = reference(p, o);
    const Tensor x = p.logits.to(low).to(device()).requires_grad_();
    Tensor loss;
    {
      AutocastGuard autocast(device().type(), low);
      loss = cross_entropy(x, p.target.to(device()), o);
    }
    EXPECT_EQ(loss.dtype(), kFloat32);
    loss.backward();
    ASSERT_EQ(x.grad().dtype(), low);
    // The same float32 arithmetic; only the order of each row's sums may differ (vector lanes).
    EXPECT_TRUE(all_close(loss.to(Device::cpu()), ref_loss, 1e-6, 1e-6))
        << "smoothing " << o.label_smoothing;
    // The gradient is rounded once into `low`, as the cast of the float32 gradient was: within
    // one unit in the last place of `low`.
    EXPECT_TRUE(
        all_close(x.grad().to(Device::cpu()).to(kFloat32), ref_grad, ulp_abs(low), ulp_rel(low)))
        << "smoothing " << o.label_smoothing;
    EXPECT_TRUE(
        all_close(x.grad().to(Device::cpu()).select(0, 1).to(kFloat32), zeros({1000}), 0, 0))
        << "the ignored row has no gradient";
  }
}

TEST_P(CrossEntropy16Bit, OutsideAutocastTheLossKeepsTheLogitsDType) {
  const DType low = GetParam().low;
  const Problem p = draw(low, 6, 50);
  const auto [ref_loss, ref_grad] = reference(p, {.reduction = Reduction::None});
  const Tensor x = p.logits.to(low).to(device()).requires_grad_();
  const Tensor rows = cross_entropy(x, p.target.to(device()), {.reduction = Reduction::None});
  EXPECT_EQ(rows.dtype(), low);
  // Each row's float32 loss rounded once (a GPU's exp may differ from the CPU's in float32's last
  // bit, which can move a rounding by one unit of `low`).
  EXPECT_TRUE(all_close(rows.to(Device::cpu()).to(kFloat32), ref_loss.to(low).to(kFloat32), 0,
                        ulp_rel(low)));
  rows.sum().backward();
  EXPECT_EQ(x.grad().dtype(), low);
  EXPECT_TRUE(
      all_close(x.grad().to(Device::cpu()).to(kFloat32), ref_grad, ulp_abs(low), ulp_rel(low)));
}

// Measured on the CPU, whose per-device counters are exact.
TEST(CrossEntropy16BitMemory, HoldsNoFloat32CopyOfTheLogits) {
  for (DType low : {kBFloat16, kFloat16}) {
    const Problem p = draw(low, 256, 4000);
    const Tensor x = p.logits.to(low).requires_grad_();
    const int64_t logits_bytes = x.numel() * 2;
    const Device cpu = Device::cpu();
    const int64_t start = memory_stats(cpu).allocated_bytes;
    reset_peak_memory_stats(cpu);
    {
      AutocastGuard autocast(DeviceType::CPU, low);
      cross_entropy(x, p.target).backward();
    }
    // The gradient (logits_bytes, kept in x.grad) and a few per-row vectors; a float32 copy of
    // the logits alone would be 2 × logits_bytes, and its float32 gradient as much again.
    const int64_t peak = memory_stats(cpu).peak_allocated_bytes - start;
    EXPECT_LT(peak, logits_bytes * 5 / 4)
        << name(low) << ": peak " << peak << " bytes, logits " << logits_bytes;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CrossEntropy16Bit, tandem::testing::low_precision_cases(),
                         tandem::testing::low_precision_case_name);

}  // namespace cross_entropy_16bit_test
