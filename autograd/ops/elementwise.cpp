// autograd/ops/elementwise.cpp — arithmetic with broadcasting: forward, then backward, per op.
// Gradients of broadcast inputs are summed back to the input's shape (raw::sum_to).
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/autograd/record.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {
namespace {

using raw::binary;
using raw::sum_to;

Tensor scalar_like(double v, const Tensor& t) { return scalar_tensor(v, t.options()); }

}  // namespace

// y = a + b          da = dy        db = dy
Tensor add(const Tensor& a, const Tensor& b) {
  if (auto c = autocast::promote({a, b})) return add((*c)[0], (*c)[1]);
  Tensor y = binary(BinaryOp::Add, a, b, "add");
  return record("add", y, {a, b}, {},
                [sa = a.shape(), sb = b.shape()](const Tensor& dy, const NeedsGrad& need,
                                                 const Saved&) -> Grads {
                  return {need[0] ? sum_to(dy, sa) : Tensor(), need[1] ? sum_to(dy, sb) : Tensor()};
                });
}

// y = a − b          da = dy        db = −dy
Tensor sub(const Tensor& a, const Tensor& b) {
  if (auto c = autocast::promote({a, b})) return sub((*c)[0], (*c)[1]);
  Tensor y = binary(BinaryOp::Sub, a, b, "sub");
  return record("sub", y, {a, b}, {},
                [sa = a.shape(), sb = b.shape()](const Tensor& dy, const NeedsGrad& need,
                                                 const Saved&) -> Grads {
                  return {need[0] ? sum_to(dy, sa) : Tensor(),
                          need[1] ? sum_to(raw::unary(UnaryOp::Neg, dy), sb) : Tensor()};
                });
}

// y = a·b            da = dy·b      db = dy·a
Tensor mul(const Tensor& a, const Tensor& b) {
  if (auto c = autocast::promote({a, b})) return mul((*c)[0], (*c)[1]);
  Tensor y = binary(BinaryOp::Mul, a, b, "mul");
  return record(
      "mul", y, {a, b}, {{"a", a}, {"b", b}},
      [](const Tensor& dy, const NeedsGrad& need, const Saved& s) -> Grads {
        const Tensor &a = s[0], &b = s[1];
        return {
            need[0] ? sum_to(binary(BinaryOp::Mul, dy, b, "mul_backward"), a.shape()) : Tensor(),
            need[1] ? sum_to(binary(BinaryOp::Mul, dy, a, "mul_backward"), b.shape()) : Tensor()};
      });
}

// y = a / b          da = dy / b    db = −dy·y / b
Tensor div(const Tensor& a, const Tensor& b) {
  if (auto c = autocast::promote({a, b})) return div((*c)[0], (*c)[1]);
  Tensor y = binary(BinaryOp::Div, a, b, "div");
  return record("div", y, {a, b}, {{"b", b}, {"result", y}},
                [sa = a.shape()](const Tensor& dy, const NeedsGrad& need, const Saved& s) -> Grads {
                  const Tensor &b = s[0], &y = s[1];
                  Grads g(2);
                  Tensor dy_b = binary(BinaryOp::Div, dy, b, "div_backward");
                  if (need[0]) g[0] = sum_to(dy_b, sa);
                  if (need[1])
                    g[1] = sum_to(
                        raw::unary(UnaryOp::Neg, binary(BinaryOp::Mul, dy_b, y, "div_backward")),
                        b.shape());
                  return g;
                });
}

// y = xᵉ             dx = dy·e·xᵉ⁻¹
Tensor pow(const Tensor& x, double e) {
  if (auto c = autocast::float32({x})) return pow((*c)[0], e);
  check_floating("pow", "input", x);
  Tensor y = binary(BinaryOp::Pow, x, e, "pow");
  return record("pow", y, {x}, {{"self", x}},
                [e](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
                  const Tensor& x = s[0];
                  Tensor d = binary(BinaryOp::Mul, binary(BinaryOp::Pow, x, e - 1, "pow_backward"),
                                    e, "pow_backward");
                  return {binary(BinaryOp::Mul, dy, d, "pow_backward")};
                });
}

// y = aᵇ             da = dy·b·aᵇ⁻¹   db = dy·y·ln a
Tensor pow(const Tensor& a, const Tensor& b) {
  if (auto c = autocast::float32({a, b})) return pow((*c)[0], (*c)[1]);
  Tensor y = binary(BinaryOp::Pow, a, b, "pow");
  return record(
      "pow", y, {a, b}, {{"self", a}, {"exponent", b}, {"result", y}},
      [](const Tensor& dy, const NeedsGrad& need, const Saved& s) -> Grads {
        const Tensor &a = s[0], &b = s[1], &y = s[2];
        Grads g(2);
        if (need[0]) {
          Tensor bm1 = binary(BinaryOp::Sub, b, 1.0, "pow_backward");
          Tensor d = binary(BinaryOp::Mul, b, binary(BinaryOp::Pow, a, bm1, "pow_backward"),
                            "pow_backward");
          g[0] = sum_to(binary(BinaryOp::Mul, dy, d, "pow_backward"), a.shape());
        }
        if (need[1]) {
          Tensor d = binary(BinaryOp::Mul, y, raw::unary(UnaryOp::Log, a), "pow_backward");
          g[1] = sum_to(binary(BinaryOp::Mul, dy, d, "pow_backward"), b.shape());
        }
        return g;
      });
}

// y = max(a, b)      the larger input gets dy (a on ties)
// y = min(a, b)      the smaller input gets dy (a on ties)
static Tensor extremum(BinaryOp op, CompareOp pick_a, const char* name, const Tensor& a,
                       const Tensor& b) {
  if (auto c = autocast::promote({a, b})) return extremum(op, pick_a, name, (*c)[0], (*c)[1]);
  Tensor y = binary(op, a, b, name);
  return record(
      name, y, {a, b}, {{"self", a}, {"other", b}},
      [pick_a, name](const Tensor& dy, const NeedsGrad& need, const Saved& s) -> Grads {
        const Tensor &a = s[0], &b = s[1];
        Tensor mask = empty(dy.shape(), {.dtype = DType::b8, .device = dy.device()});
        kernels(dy.device())
            .compare(pick_a, detail::expand_to(a, dy.shape(), name),
                     detail::expand_to(b, dy.shape(), name), mask);
        Tensor zero = zeros_like(dy);
        Grads g(2);
        if (need[0]) {
          g[0] = empty_like(dy);
          kernels(dy.device()).where(mask, dy, detail::expand_to(zero, dy.shape(), name), g[0]);
          g[0] = sum_to(g[0], a.shape());
        }
        if (need[1]) {
          g[1] = empty_like(dy);
          kernels(dy.device()).where(mask, detail::expand_to(zero, dy.shape(), name), dy, g[1]);
          g[1] = sum_to(g[1], b.shape());
        }
        return g;
      });
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return extremum(BinaryOp::Maximum, CompareOp::Ge, "maximum", a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return extremum(BinaryOp::Minimum, CompareOp::Le, "minimum", a, b);
}

// y = −x             dx = −dy
Tensor neg(const Tensor& x) {
  Tensor y = raw::unary(UnaryOp::Neg, x);
  return record("neg", y, {x}, {}, [](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
    return {raw::unary(UnaryOp::Neg, dy)};
  });
}

// y = eˣ             dx = dy·y
Tensor exp(const Tensor& x) {
  if (auto c = autocast::float32({x})) return exp((*c)[0]);
  Tensor y = raw::unary(UnaryOp::Exp, x);
  return record("exp", y, {x}, {{"result", y}},
                [](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
                  return {binary(BinaryOp::Mul, dy, s[0], "exp_backward")};
                });
}

// y = ln x           dx = dy / x
Tensor log(const Tensor& x) {
  if (auto c = autocast::float32({x})) return log((*c)[0]);
  Tensor y = raw::unary(UnaryOp::Log, x);
  return record("log", y, {x}, {{"self", x}},
                [](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
                  return {binary(BinaryOp::Div, dy, s[0], "log_backward")};
                });
}

// y = √x             dx = dy / (2y)
Tensor sqrt(const Tensor& x) {
  Tensor y = raw::unary(UnaryOp::Sqrt, x);
  return record(
      "sqrt", y, {x}, {{"result", y}},
      [](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
        return {binary(BinaryOp::Div, dy, binary(BinaryOp::Mul, s[0], 2.0, "sqrt_backward"),
                       "sqrt_backward")};
      });
}

// y = |x|            dx = dy·sign(x)   (0 at x = 0)
Tensor abs(const Tensor& x) {
  Tensor y = raw::unary(UnaryOp::Abs, x);
  return record("abs", y, {x}, {{"self", x}},
                [](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
                  const Tensor& x = s[0];
                  Tensor sign =
                      binary(BinaryOp::Div, x, raw::unary(UnaryOp::Abs, x), "abs_backward");
                  Tensor zero = zeros_like(x),
                         pos = empty(x.shape(), {.dtype = DType::b8, .device = x.device()});
                  kernels(x.device()).compare(CompareOp::Ne, x, zero, pos);
                  Tensor sgn = empty_like(x);
                  kernels(x.device()).where(pos, sign, zero, sgn);
                  return {binary(BinaryOp::Mul, dy, sgn, "abs_backward")};
                });
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, scalar_like(b, a)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_like(b, a)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_like(b, a)); }
Tensor operator/(const Tensor& a, double b) { return div(a, scalar_like(b, a)); }
Tensor operator+(double a, const Tensor& b) { return add(scalar_like(a, b), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_like(a, b), b); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_like(a, b), b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_like(a, b), b); }
Tensor operator-(const Tensor& x) { return neg(x); }

Tensor Tensor::neg() const { return tandem::neg(*this); }
Tensor Tensor::exp() const { return tandem::exp(*this); }
Tensor Tensor::log() const { return tandem::log(*this); }
Tensor Tensor::sqrt() const { return tandem::sqrt(*this); }
Tensor Tensor::pow(double e) const { return tandem::pow(*this, e); }
Tensor Tensor::pow(const Tensor& e) const { return tandem::pow(*this, e); }

}  // namespace tandem
