// Kernels::adam_step_many (one launch per 48 tensors on CUDA) equals adam_step tensor by tensor,
// bit for bit: sizes around the 1,024-element chunks, empty tensors, more tensors than one launch
// takes, mixed dtypes, AdamW and coupled decay. On the CPU and on cuda:0 (skipped, visibly,
// without a GPU).
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

}  // namespace
