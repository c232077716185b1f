// autograd/ops/activation.cpp — relu, sigmoid, tanh, gelu: forward, then backward, per op.
// Forwards are unary kernels; each backward has its own kernel in core/kernels/*/activation.*.
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/autograd/record.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {

// relu(x) = max(x, 0)        dx = dy · [x > 0]
Tensor relu(const Tensor& x) {
  check_floating("relu", "input", x);
  Tensor y = raw::unary(UnaryOp::Relu, x);
  return record("relu", y, {x}, {{"self", x}},
                [](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
                  Tensor dx = empty_like(dy);
                  kernels(dy.device()).relu_backward(detail::contiguous(s[0]), dy, dx);
                  return {dx};
                });
}

// sigmoid(x) = 1 / (1 + e⁻ˣ)  dx = dy · y(1 − y)
Tensor sigmoid(const Tensor& x) {
  check_floating("sigmoid", "input", x);
  Tensor y = raw::unary(UnaryOp::Sigmoid, x);
  return record("sigmoid", y, {x}, {{"result", y}},
                [](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
                  Tensor dx = empty_like(dy);
                  kernels(dy.device()).sigmoid_backward(s[0], dy, dx);
                  return {dx};
                });
}

// tanh(x)                    dx = dy · (1 − y²)
Tensor tanh(const Tensor& x) {
  check_floating("tanh", "input", x);
  Tensor y = raw::unary(UnaryOp::Tanh, x);
  return record("tanh", y, {x}, {{"result", y}},
                [](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
                  Tensor dx = empty_like(dy);
                  kernels(dy.device()).tanh_backward(s[0], dy, dx);
                  return {dx};
                });
}

// gelu(x) = x·Φ(x)                          dx = dy · (Φ(x) + x·φ(x))
// tanh form: x/2·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³)
//                                            dx = dy · (½(1 + t) + ½x(1 − t²)·u'),  t = tanh(u)
Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  const bool tanh_form = approximate == GeluApproximate::Tanh;
  const char* name = tanh_form ? "gelu_tanh" : "gelu";
  check_floating(name, "input", x);
  Tensor y = raw::unary(tanh_form ? UnaryOp::GeluTanh : UnaryOp::Gelu, x);
  return record(name, y, {x}, {{"self", x}},
                [tanh_form](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
                  Tensor dx = empty_like(dy);
                  const Kernels& k = kernels(dy.device());
                  (tanh_form ? k.gelu_tanh_backward : k.gelu_backward)(detail::contiguous(s[0]), dy,
                                                                       dx);
                  return {dx};
                });
}

Tensor Tensor::relu() const { return tandem::relu(*this); }
Tensor Tensor::sigmoid() const { return tandem::sigmoid(*this); }
Tensor Tensor::tanh() const { return tandem::tanh(*this); }
Tensor Tensor::gelu() const { return tandem::gelu(*this); }

}  // namespace tandem
