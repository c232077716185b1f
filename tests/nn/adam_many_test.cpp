// Kernels::adam_step_many (one launch per 48 tensors on CUDA) equals adam_step tensor by tensor,
// bit for bit: sizes around the 1,024-element chunks, empty tensors, more tensors than one launch
// takes, mixed dtypes, AdamW and coupled decay; its device-counting, flag-skipping variant; and
// GradScaler's update kernel. On the CPU and on cuda:0 (skipped, visibly, without a GPU).
#include <tandem/core/kernels/kernels.h>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::values;

namespace {

struct Params {
  std::vector<Tensor> p, g, m, v;
};

Params make(Device device) {
  manual_seed(11);
  Params s;
  const std::vector<int64_t> sizes = {0, 1, 3, 1023, 1024, 1025, 4096, 5000, 17};
  for (int i = 0; i < 110; ++i) {  // > 2 × 48: three launches per dtype run
    const int64_t n = sizes[size_t(i) % sizes.size()] + (i / 9);
    const DType t = i % 5 == 4 ? kFloat64 : kFloat32;  // runs of one dtype broken by another
    s.p.push_back(randn({n}, {.dtype = t}).to(device));
    s.g.push_back(randn({n}, {.dtype = t}).to(device));
    s.m.push_back(zeros({n}, {.dtype = t, .device = device}));
    s.v.push_back(zeros({n}, {.dtype = t, .device = device}));
  }
  return s;
}

void expect_many_equals_one_by_one(Device device, bool decoupled, double weight_decay) {
  Params one = make(device), many = make(device);
  for (int64_t step = 1; step <= 3; ++step) {
    const AdamParams a{1e-2, 0.9, 0.999, 1e-8, weight_decay, step, decoupled};
    for (size_t i = 0; i < one.p.size(); ++i)
      kernels(device).adam_step(one.p[i], one.g[i], one.m[i], one.v[i], a);
    std::vector<AdamSlot> slots;
    for (size_t i = 0; i < many.p.size(); ++i)
      slots.push_back({&many.p[i], &many.g[i], &many.m[i], &many.v[i]});
    kernels(device).adam_step_many(slots, a);
  }
  for (size_t i = 0; i < one.p.size(); ++i) {
    EXPECT_EQ(values(many.p[i]), values(one.p[i])) << "param " << i << " on " << device;
    EXPECT_EQ(values(many.v[i]), values(one.v[i])) << "exp_avg_sq " << i << " on " << device;
  }
}

TEST(AdamMany, EqualsOneTensorAtATimeOnTheCpu) {
  expect_many_equals_one_by_one(Device::cpu(), false, 0.0);
  expect_many_equals_one_by_one(Device::cpu(), true, 0.1);
}

TEST(AdamMany, EqualsOneTensorAtATimeOnCuda) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  expect_many_equals_one_by_one(Device::cuda(0), false, 0.0);
  expect_many_equals_one_by_one(Device::cuda(0), false, 0.1);
  expect_many_equals_one_by_one(Device::cuda(0), true, 0.1);
}

// adam_step_many_unless: with the flag clear it equals adam_step_many at the counts it keeps on
// the device (advanced by one each call); with the flag set nothing changes, counts included.
// On the CPU bit for bit; on CUDA the device's pow may round the bias corrections' last bit.
void expect_unless_equals_many(Device device, double rel) {
  Params ref = make(device), dev = make(device);
  std::vector<Tensor> counts;
  for (size_t i = 0; i < dev.p.size(); ++i)
    counts.push_back(zeros({}, {.dtype = kFloat32, .device = device}));
  const Tensor clear = zeros({1}, {.dtype = kFloat32, .device = device}),
               set = full({1}, 1.0, {.dtype = kFloat32, .device = device});
  for (int64_t step = 1; step <= 3; ++step) {
    const AdamParams a{1e-2, 0.9, 0.999, 1e-8, 0.1, step, true};
    std::vector<AdamSlot> ref_slots, dev_slots;
    for (size_t i = 0; i < ref.p.size(); ++i) {
      ref_slots.push_back({&ref.p[i], &ref.g[i], &ref.m[i], &ref.v[i]});
      dev_slots.push_back({&dev.p[i], &dev.g[i], &dev.m[i], &dev.v[i], &counts[i]});
    }
    kernels(device).adam_step_many(ref_slots, a);
    AdamParams ignored = a;
    ignored.step = 1000;  // the counts come from the device
    kernels(device).adam_step_many_unless(dev_slots, ignored, set);
    kernels(device).adam_step_many_unless(dev_slots, ignored, clear);
    kernels(device).adam_step_many_unless(dev_slots, ignored, set);
  }
  for (size_t i = 0; i < ref.p.size(); ++i) {
    EXPECT_EQ(values(counts[i]), std::vector<double>{3.0}) << "count " << i;
    const std::vector<double> got = values(dev.p[i]), want = values(ref.p[i]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k)
      ASSERT_LE(std::abs(got[k] - want[k]), rel * std::abs(want[k])) << i << "[" << k << "]";
  }
}

TEST(AdamMany, SkipsOnTheDevicesFlagAndCountsThereOnTheCpu) {
  expect_unless_equals_many(Device::cpu(), 0.0);
}

TEST(AdamMany, SkipsOnTheDevicesFlagAndCountsThereOnCuda) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  expect_unless_equals_many(Device::cuda(0), 1e-6);
}

// GradScaler's update rule on the device: backoff on a flag, growth after `interval` clear ones,
// a growth that would overflow float32 left out.
void expect_amp_update_scale(Device device) {
  Tensor scale = full({1}, 8.0, {.dtype = kFloat32, .device = device});
  Tensor tracker = zeros({1}, {.dtype = kInt64, .device = device});
  Tensor skipped = zeros({1}, {.dtype = kInt64, .device = device});
  const AmpScaleParams p{.growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 2};
  const std::vector<float> flags = {0, 1, 0, 0, 0};
  const std::vector<double> scales = {8, 4, 4, 8, 8}, trackers = {1, 0, 1, 0, 1};
  for (size_t i = 0; i < flags.size(); ++i) {
    const Tensor flag = full({1}, flags[i], {.dtype = kFloat32, .device = device});
    kernels(device).amp_update_scale(scale, tracker, skipped, flag, p);
    EXPECT_EQ(values(scale), std::vector<double>{scales[i]}) << device << " after " << i;
    EXPECT_EQ(values(tracker), std::vector<double>{trackers[i]}) << device << " after " << i;
  }
  EXPECT_EQ(values(skipped), std::vector<double>{1});
  Tensor huge = full({1}, 3e38, {.dtype = kFloat32, .device = device});
  const Tensor clear = zeros({1}, {.dtype = kFloat32, .device = device});
  const AmpScaleParams every_step{.growth_interval = 1};
  kernels(device).amp_update_scale(huge, tracker, skipped, clear, every_step);
  EXPECT_EQ(values(huge), std::vector<double>{double(3e38f)});
}

TEST(AmpUpdateScale, BacksOffGrowsAndNeverOverflowsOnTheCpu) {
  expect_amp_update_scale(Device::cpu());
}

TEST(AmpUpdateScale, BacksOffGrowsAndNeverOverflowsOnCuda) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  expect_amp_update_scale(Device::cuda(0));
}

}  // namespace
