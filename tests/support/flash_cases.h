// tests/support/flash_cases.h — the cases on which the tensor-core attention kernels are checked,
// shared by the CUDA test (tests/autograd/flash_attention_test.cpp) and their emulation on CPU
// threads (tests/emulated/): the shapes, the inputs, the float32 reference (Tandem's fused
// attention on the CPU) and the tolerance.
#pragma once

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "support/expect.h"

namespace tandem::testing::flash {

struct Case {
  std::string name;
  DType dtype;
  int64_t b, tq, tk, d;
  bool causal = false;
  double dropout_p = 0;
  enum class Mask { None, Bool, FloatPerBatch } mask = Mask::None;
};
inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

/// Lengths inside one 64-row tile and across several with ragged ends, Tq ≠ Tk both ways, every
/// head dim, both 16-bit types, both mask kinds and dropout.
inline std::vector<Case> cases() {
  using M = Case::Mask;
  return {
      Case{"bf16_d64_one_tile_causal", kBFloat16, 2, 64, 64, 64, true},
      Case{"bf16_d64_ragged_causal", kBFloat16, 3, 100, 100, 64, true},
      Case{"bf16_d64_three_tiles", kBFloat16, 2, 200, 200, 64},
      Case{"bf16_d64_one_row", kBFloat16, 2, 1, 1, 64, true},
      Case{"bf16_d64_fewer_queries_causal", kBFloat16, 1, 37, 130, 64, true},
      Case{"bf16_d64_fewer_keys_causal", kBFloat16, 1, 130, 37, 64, true},
      Case{"bf16_d32_causal", kBFloat16, 2, 150, 150, 32, true},
      Case{"bf16_d128_causal", kBFloat16, 1, 150, 150, 128, true},
      Case{"fp16_d64_causal", kFloat16, 2, 100, 100, 64, true},
      Case{"fp16_d128", kFloat16, 1, 90, 90, 128},
      Case{"bf16_d64_bool_mask", kBFloat16, 2, 70, 80, 64, false, 0, M::Bool},
      Case{"bf16_d64_float_mask_per_batch", kBFloat16, 2, 70, 80, 64, false, 0, M::FloatPerBatch},
      Case{"bf16_d64_dropout_causal", kBFloat16, 2, 96, 96, 64, true, 0.2}};
}

/// q, k, v, an upstream gradient dy and the op's mask (or none), drawn in float32 and rounded to
/// the case's dtype, so that every side starts from the same values.
struct Inputs {
  Tensor q, k, v, dy, mask;
};
inline Inputs draw(const Case& c) {
  manual_seed(3);
  auto rounded = [&](const Shape& s) { return randn(s).to(c.dtype).to(kFloat32); };
  Inputs in{rounded({c.b, c.tq, c.d}), rounded({c.b, c.tk, c.d}), rounded({c.b, c.tk, c.d}),
            rounded({c.b, c.tq, c.d}), Tensor()};
  if (c.mask == Case::Mask::Bool) in.mask = rand({c.tq, c.tk}).ge(0.3);
  if (c.mask == Case::Mask::FloatPerBatch) in.mask = rounded({c.b, c.tq, c.tk});
  return in;
}

/// The seed dropout draws from, on every side.
inline constexpr uint64_t kDropoutSeed = 11;

/// The output and dq, dk, dv of scaled_dot_product_attention on `device` in `dtype` with
/// `backend`, as float32 on the CPU.
inline std::vector<Tensor> run(const Case& c, const Inputs& in, Device device, DType dtype,
                               AttentionBackend backend) {
  auto leaf = [&](const Tensor& t) { return t.to(dtype).to(device).requires_grad_(); };
  const Tensor q = leaf(in.q), k = leaf(in.k), v = leaf(in.v);
  AttentionOptions o{.causal = c.causal, .dropout_p = c.dropout_p, .backend = backend};
  if (in.mask.defined()) o.attn_mask = in.mask.to(device);
  manual_seed(kDropoutSeed);
  const Tensor y = scaled_dot_product_attention(q, k, v, o);
  (y * in.dy.to(dtype).to(device)).sum().backward();
  std::vector<Tensor> out;
  for (const Tensor& t : {y, q.grad(), k.grad(), v.grad()})
    out.push_back(t.to(Device::cpu()).to(kFloat32));
  return out;
}

/// The reference: the CPU's fused kernel in float32.
inline std::vector<Tensor> reference(const Case& c, const Inputs& in) {
  return run(c, in, Device::cpu(), kFloat32, AttentionBackend::Fused);
}

/// Within 16-bit rounding of the float32 reference: the probabilities and dS are rounded before
/// their products, and the output and gradients once more. Relative to the largest element, as a
/// gradient's small elements are sums of terms that cancel. The emulation's largest errors on these
/// cases (2026-11-27): 0.0054 of the largest element in bfloat16, 0.0006 in float16.
inline void expect_close(const Case& c, const std::vector<Tensor>& got,
                         const std::vector<Tensor>& want) {
  const double tol = c.dtype == kBFloat16 ? 2e-2 : 5e-3;
  const char* what[] = {"output", "dq", "dk", "dv"};
  for (size_t i = 0; i < got.size(); ++i) {
    const double size = std::max(1.0, abs(want[i]).max().item<double>());
    EXPECT_TRUE(all_close(got[i], want[i], tol * size, tol)) << c.name << ": " << what[i];
  }
}

}  // namespace tandem::testing::flash
