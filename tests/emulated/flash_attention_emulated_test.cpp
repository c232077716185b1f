// tests/emulated/flash_attention_emulated_test.cpp — the tensor-core attention kernels
// (core/kernels/cuda/flash_kernels.cuh), their very source, run on CPU threads by
// cuda_emulation.h and launched as cuda/flash_attention.cu launches them, against Tandem's fused
// attention on the CPU in float32 from the same 16-bit inputs: the output and dq, dk, dv within
// 16-bit rounding, for head dims 32, 64 and 128, ragged tiles, Tq ≠ Tk, causal or not, both mask
// kinds and dropout, and the NaNs a NaN in q, k or v leaves; and that no WMMA access or launch asks
// what the hardware would refuse. What it cannot check (speed, and the hardware itself) the CUDA
// cases in tests/autograd/flash_attention_test.cpp check on a GPU.
#include "emulated/cuda_emulation.h"
// The emulation first: the kernels take CUDA's names from it.
#include <tandem/core/kernels/cuda/flash_kernels.cuh>

#include <limits>
#include <set>

#include "support/flash_cases.h"

namespace flash_emulated {

using namespace tandem;
using namespace tandem::cuda::flash;
using tandem::testing::flash::Case;
namespace cases = tandem::testing::flash;

// The output, dq, dk and dv from the emulated kernels, as float32. `mask` is the kernels' form:
// additive, in the inputs' dtype, [1 or B, Tq, Tk].
template <typename S, int D>
std::vector<Tensor> emulated(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& dout, const Tensor& mask, double scale) {
  const int64_t b = c.b, tq = c.tq, tk = c.tk;
  AttentionParams a{.scale = scale, .causal = c.causal, .dropout_p = c.dropout_p, .flash = true};
  manual_seed(cases::kDropoutSeed);  // the counters the op draws on the CPU
  if (a.dropout_p > 0) a.rng = reserve_random(Device::cpu(), uint64_t(b * tq * tk));
  const Scores<S> sc = scores_for<S>(q, k, mask, a);
  Tensor o = empty({b, tq, D}, q.options()), lse = empty({b, tq});
  Tensor dq = empty(q.shape(), q.options()), dk = empty(k.shape(), k.options()),
         dv = empty(v.shape(), v.options()), delta = empty({b * tq});
  emulation::launch(unsigned(tiles_of(tq) * b), kBlockThreads, kForwardBytes<S, D>, [&] {
    flash_forward_kernel<S, D>(in<S>(q), in<S>(k), in<S>(v), sc, tiles_of(tq), out_of<S>(o),
                               lse.data<float>());
  });
  emulation::launch(1, kBlockThreads, 0, [&] {
    flash_delta_kernel<S>(in<S>(o), in<S>(dout), delta.data<float>(), b * tq, D);
  });
  emulation::launch(unsigned(tiles_of(tq) * b), kBlockThreads, kDqBytes<S, D>, [&] {
    flash_dq_kernel<S, D>(in<S>(q), in<S>(k), in<S>(v), in<S>(dout), lse.data<float>(),
                          delta.data<float>(), sc, tiles_of(tq), out_of<S>(dq));
  });
  emulation::launch(unsigned(tiles_of(tk) * b), kBlockThreads, kDkDvBytes<S, D>, [&] {
    flash_dkdv_kernel<S, D>(in<S>(q), in<S>(k), in<S>(v), in<S>(dout), lse.data<float>(),
                            delta.data<float>(), sc, tiles_of(tk), out_of<S>(dk), out_of<S>(dv));
  });
  // What the hardware would refuse, each kind once.
  const std::vector<std::string> refused = emulation::take_violations();
  for (const std::string& v : std::set<std::string>(refused.begin(), refused.end()))
    ADD_FAILURE() << c.name << ": " << v;
  std::vector<Tensor> r;
  for (const Tensor& t : {o, dq, dk, dv}) r.push_back(t.to(kFloat32));
  return r;
}

class FlashEmulated : public ::testing::TestWithParam<Case> {};

TEST_P(FlashEmulated, MatchesTheCpuInFloat32) {
  const Case& c = GetParam();
  const cases::Inputs in = cases::draw(c);
  // The kernels' form of the mask: additive, in the inputs' dtype, [1 or B, Tq, Tk].
  Tensor additive = in.mask;
  if (c.mask == Case::Mask::Bool)
    additive = where(in.mask, zeros({}), full({}, -std::numeric_limits<double>::infinity()))
                   .reshape({1, c.tq, c.tk});
  auto low = [&](const Tensor& t) { return t.defined() ? t.to(c.dtype).contiguous() : t; };
  const Tensor q = low(in.q), k = low(in.k), v = low(in.v), dy = low(in.dy), mask = low(additive);
  const double scale = 1.0 / std::sqrt(double(c.d));
  std::vector<Tensor> got;
  auto run = [&]<typename S>() {
    switch (c.d) {
      case 32:
        got = emulated<S, 32>(c, q, k, v, dy, mask, scale);
        break;
      case 64:
        got = emulated<S, 64>(c, q, k, v, dy, mask, scale);
        break;
      default:
        got = emulated<S, 128>(c, q, k, v, dy, mask, scale);
    }
  };
  if (c.dtype == kBFloat16)
    run.template operator()<__nv_bfloat16>();
  else
    run.template operator()<__half>();
  cases::expect_close(c, got, cases::reference(c, in));
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashEmulated, ::testing::ValuesIn(cases::cases()),
                         [](const auto& info) { return info.param.name; });

// A NaN in q, k or v: the emulated kernels' NaNs are the CPU fused kernel's, element for element,
// in the output and dq, dk, dv (no mask: both visit every key). fmaxf dropped it, and a row of NaN
// scores passed for a row that saw no key: zeros out.
TEST(FlashEmulatedNaN, NaNsAreTheCpuFusedKernels) {
  const Case c{"bf16_d32_nan", kBFloat16, 1, 40, 40, 32};
  for (int which = 0; which < 3; ++which) {
    cases::Inputs in = cases::draw(c);
    Tensor& x = which == 0 ? in.q : which == 1 ? in.k : in.v;
    std::vector<float> values = x.to_vector<float>();
    values[5 * 32 + 7] = std::numeric_limits<float>::quiet_NaN();  // row 5, column 7
    x = from_vector(values, x.shape());
    auto low = [&](const Tensor& t) { return t.to(c.dtype).contiguous(); };
    const std::vector<Tensor> got = emulated<__nv_bfloat16, 32>(
        c, low(in.q), low(in.k), low(in.v), low(in.dy), Tensor(), 1.0 / std::sqrt(32.0));
    const std::vector<Tensor> want = cases::reference(c, in);
    const char* what[] = {"output", "dq", "dk", "dv"};
    for (size_t i = 0; i < got.size(); ++i) {
      const std::vector<float> g = got[i].to_vector<float>(), w = want[i].to_vector<float>();
      size_t first = 0, nans = 0;
      while (first < w.size() && std::isnan(g[first]) == std::isnan(w[first])) ++first;
      for (float e : w) nans += std::isnan(e);
      EXPECT_EQ(first, w.size()) << what[i] << ", NaN in input " << which << ": first differs at "
                                 << first;
      if (i == 0) {
        EXPECT_GT(nans, 0u) << "NaN in input " << which;
      }
    }
  }
}

}  // namespace flash_emulated
