// autograd/ops/inplace.cpp — in-place updates (add_, mul_, addcmul_, zero_, copy_, ...). They are
// not recorded: with grad mode on they refuse a tensor that requires grad, so a parameter is only
// updated under NoGradGuard (as optimizers do). Every one bumps the version counter, which is how
// backward notices that a tensor it saved was changed.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {
namespace {

void check_inplace(const char* op, const Tensor& self, const Tensor& other = Tensor()) {
  TD_CHECK_AS(AutogradError,
              !GradMode::is_enabled() ||
                  (!self.requires_grad() && !(other.defined() && other.requires_grad())),
              op,
              ": in-place ops are not recorded by autograd, and an operand requires grad (self ",
              describe(self),
              ")\n  hint: update parameters under NoGradGuard (as optimizers do), or use the "
              "out-of-place op");
  if (other.defined()) {
    check_same_device(op, {{"self", self}, {"other", other}});
    check_same_dtype(op, {{"self", self}, {"other", other}});
  }
}

// `other` broadcast to self's shape and made contiguous (the in-place kernels need that).
Tensor fit(const Tensor& other, const Tensor& self, const char* op) {
  TD_CHECK_SHAPE(broadcast_shapes(self.shape(), other.shape(), op) == self.shape(), op, ": other ",
                 other.shape(), " cannot be broadcast to self ", self.shape(), " in place");
  return detail::contiguous(detail::expand_to(other, self.shape(), op));
}

// Runs an update on a contiguous version of self, writing back if self is a strided view.
template <typename F>
Tensor& update(Tensor& self, F f) {
  if (self.numel() == 0) return self;
  if (self.is_contiguous()) {
    f(self);
  } else {
    Tensor tmp = detail::contiguous(self);
    f(tmp);
    kernels(self.device()).copy(tmp, self);
  }
  detail::bump_version(self);
  return self;
}

}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace("add_", *this, other);
  Tensor o = fit(other, *this, "add_");
  return update(*this, [&](Tensor& s) { kernels(s.device()).add_scaled(s, o, alpha); });
}

Tensor& Tensor::sub_(const Tensor& other, double alpha) { return add_(other, -alpha); }

Tensor& Tensor::add_(double value) {
  check_inplace("add_", *this);
  const Tensor v = scalar_tensor(value, options());
  return update(*this, [&](Tensor& s) {
    kernels(s.device()).binary(BinaryOp::Add, s, detail::expand_to(v, s.shape(), "add_"), s);
  });
}

Tensor& Tensor::mul_(const Tensor& other) {
  check_inplace("mul_", *this, other);
  Tensor o = fit(other, *this, "mul_");
  return update(*this, [&](Tensor& s) { kernels(s.device()).binary(BinaryOp::Mul, s, o, s); });
}

Tensor& Tensor::mul_(double value) {
  check_inplace("mul_", *this);
  const Tensor v = scalar_tensor(value, options());
  return update(*this, [&](Tensor& s) {
    kernels(s.device()).binary(BinaryOp::Mul, s, detail::expand_to(v, s.shape(), "mul_"), s);
  });
}

Tensor& Tensor::div_(double value) { return mul_(1.0 / value); }

Tensor& Tensor::addcmul_(const Tensor& t1, const Tensor& t2, double value) {
  check_inplace("addcmul_", *this, t1);
  check_inplace("addcmul_", *this, t2);
  Tensor a = fit(t1, *this, "addcmul_"), b = fit(t2, *this, "addcmul_");
  return update(*this, [&](Tensor& s) { kernels(s.device()).addcmul(s, a, b, value); });
}

Tensor& Tensor::addcdiv_(const Tensor& t1, const Tensor& t2, double value) {
  check_inplace("addcdiv_", *this, t1);
  check_inplace("addcdiv_", *this, t2);
  Tensor a = fit(t1, *this, "addcdiv_"), b = fit(t2, *this, "addcdiv_");
  return update(*this, [&](Tensor& s) { kernels(s.device()).addcdiv(s, a, b, value); });
}

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  check_inplace("fill_", *this);
  if (numel() > 0) kernels(device()).fill(*this, value);
  detail::bump_version(*this);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  TD_CHECK_AS(AutogradError, !GradMode::is_enabled() || !requires_grad(),
              "copy_: in-place ops are not recorded by autograd, "
              "and self requires grad (",
              describe(*this), ")\n  hint: copy under NoGradGuard");
  TD_CHECK_SHAPE(broadcast_shapes(shape(), src.shape(), "copy_") == shape(), "copy_: source ",
                 src.shape(), " cannot be broadcast to self ", shape());
  if (numel() == 0) return *this;
  Tensor s = detail::expand_to(src, shape(), "copy_");
  if (s.device() != device()) s = detail::convert(s, device(), dtype());  // cross-device: stage
  kernels(device()).copy(s, *this);
  detail::bump_version(*this);
  return *this;
}

}  // namespace tandem
