// nn/init.cpp — the initialisers. All go through uniform_/normal_, which use the device's random
// kernels, so a model initialised on cuda:0 gets the same numbers as on the CPU.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/generator.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/nn/init.h>
#include <cmath>

namespace tandem::nn::init {
namespace {

// Draws into a contiguous temporary when `t` is a strided view, then copies back.
template <typename F>
Tensor& fill_random(Tensor& t, F draw) {
  check_floating("init", "tensor", t);
  if (t.numel() == 0) return t;
  NoGradGuard no_grad;
  const GeneratorState state = reserve_random(t.device(), uint64_t(t.numel()));
  if (t.is_contiguous()) {
    draw(t, state);
  } else {
    Tensor tmp = empty(t.shape(), t.options());
    draw(tmp, state);
    t.copy_(tmp);
  }
  detail::bump_version(t);
  return t;
}

}  // namespace

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t) {
  TD_CHECK_SHAPE(t.dim() >= 2,
                 "init: fan in and fan out need a tensor with at least 2 dims, but got shape ",
                 t.shape());
  int64_t field = 1;
  for (int64_t d = 2; d < t.dim(); ++d) field *= t.size(d);
  return {t.size(1) * field, t.size(0) * field};
}

Tensor& uniform_(Tensor& t, double low, double high) {
  return fill_random(
      t, [&](Tensor& out, GeneratorState s) { kernels(out.device()).uniform(out, low, high, s); });
}

Tensor& normal_(Tensor& t, double mean, double std) {
  return fill_random(
      t, [&](Tensor& out, GeneratorState s) { kernels(out.device()).normal(out, mean, std, s); });
}

Tensor& constant_(Tensor& t, double value) {
  NoGradGuard no_grad;
  return t.fill_(value);
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1); }

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode) {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  const double gain = std::sqrt(2.0 / (1 + a * a));
  const double bound =
      std::sqrt(3.0) * gain / std::sqrt(double(mode == FanMode::FanIn ? fan_in : fan_out));
  return uniform_(t, -bound, bound);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode) {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  const double gain = std::sqrt(2.0 / (1 + a * a));
  return normal_(t, 0, gain / std::sqrt(double(mode == FanMode::FanIn ? fan_in : fan_out)));
}

Tensor& xavier_uniform_(Tensor& t, double gain) {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  const double bound = gain * std::sqrt(6.0 / double(fan_in + fan_out));
  return uniform_(t, -bound, bound);
}

Tensor& xavier_normal_(Tensor& t, double gain) {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  return normal_(t, 0, gain * std::sqrt(2.0 / double(fan_in + fan_out)));
}

}  // namespace tandem::nn::init
