// core/kernels/cpu/elementwise.cpp — unary, binary, comparison and where kernels on the CPU.
// The strided loop (strided.h) hands out 1-D runs; each operand of a run is either contiguous
// (an Eigen map), broadcast (an Eigen constant) or strided (gathered into a small buffer first),
// so Eigen's vectorised exp/log/tanh/erf do the arithmetic in every case. bfloat16 and float16
// runs are widened into float32 buffers and the result rounded once (runs.h).
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/runs.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>

namespace tandem::cpu {
namespace {

template <typename T, typename Op>
void binary_loop(const Tensor& a, const Tensor& b, Tensor& out, Op op) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  for_each_run<3>(out.shape(), {&out.strides(), &a.strides(), &b.strides()},
                  [&](const auto& off, int64_t n, const auto& st) {
                    write_run(po + off[0], n, [&](auto& o) {
                      operand<0>(pa + off[1], st[1], n, [&](const auto& x) {
                        operand<1>(pb + off[2], st[2], n, [&](const auto& y) { o = op(x, y); });
                      });
                    });
                  });
}

template <typename T, typename Op>
void unary_loop(const Tensor& x, Tensor& y, Op op) {
  const T* px = x.data<T>();
  T* py = y.data<T>();
  for_each_run<2>(y.shape(), {&y.strides(), &x.strides()},
                  [&](const auto& off, int64_t n, const auto& st) {
                    write_run(py + off[0], n, [&](auto& o) {
                      operand<0>(px + off[1], st[1], n, [&](const auto& v) { o = op(v); });
                    });
                  });
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, Tensor& y) {
  if (x.dtype() == DType::i64 && (op == UnaryOp::Neg || op == UnaryOp::Abs)) {
    if (op == UnaryOp::Neg) return unary_loop<int64_t>(x, y, [](const auto& v) { return -v; });
    return unary_loop<int64_t>(x, y, [](const auto& v) { return v.abs(); });
  }
  dispatch<FloatTypesWith16Bit>(x.dtype(), name(op), [&]<typename T>() {
    using C = compute_t<T>;
    switch (op) {
      case UnaryOp::Neg:
        return unary_loop<T>(x, y, [](const auto& v) { return -v; });
      case UnaryOp::Exp:
        return unary_loop<T>(x, y, [](const auto& v) { return v.exp(); });
      case UnaryOp::Log:
        return unary_loop<T>(x, y, [](const auto& v) { return v.log(); });
      case UnaryOp::Sqrt:
        return unary_loop<T>(x, y, [](const auto& v) { return v.unaryExpr(ExactSqrt{}); });
      case UnaryOp::Abs:
        return unary_loop<T>(x, y, [](const auto& v) { return v.abs(); });
      case UnaryOp::Relu:  // Eigen's max(v, 0) is std::max's: v when v is NaN, as torch.relu
        return unary_loop<T>(x, y, [](const auto& v) { return v.max(C(0)); });
      case UnaryOp::Sigmoid:
        return unary_loop<T>(x, y, [](const auto& v) { return v.logistic(); });
      case UnaryOp::Tanh:
        return unary_loop<T>(x, y, [](const auto& v) { return v.tanh(); });
      case UnaryOp::Gelu:  // exact GELU, PyTorch's default: x·Φ(x) = x/2·(1 + erf(x/√2))
        return unary_loop<T>(
            x, y, [](const auto& v) { return C(0.5) * v * (C(1) + (v * C(M_SQRT1_2)).erf()); });
      case UnaryOp::GeluTanh:  // GPT-2's: x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
        return unary_loop<T>(x, y, [](const auto& v) {
          return C(0.5) * v *
                 (C(1) + (C(0.7978845608028654) * (v + C(0.044715) * v * v * v)).tanh());
        });
    }
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (a.dtype() == DType::i64) {
    TD_CHECK_DTYPE(op != BinaryOp::Div && op != BinaryOp::Pow, name(op),
                   ": not defined for int64 tensors; convert with .to(kFloat32) first");
  }
  dispatch<NumericTypesWith16Bit>(a.dtype(), name(op), [&]<typename T>() {
    using C = compute_t<T>;
    switch (op) {
      case BinaryOp::Add:
        return binary_loop<T>(a, b, out, [](const auto& x, const auto& y) { return x + y; });
      case BinaryOp::Sub:
        return binary_loop<T>(a, b, out, [](const auto& x, const auto& y) { return x - y; });
      case BinaryOp::Mul:
        return binary_loop<T>(a, b, out, [](const auto& x, const auto& y) { return x * y; });
      case BinaryOp::Maximum:  // NaN if either is (x.max(y) drops a NaN in y: eigen.h)
        return binary_loop<T>(
            a, b, out, [](const auto& x, const auto& y) { return x.binaryExpr(y, NanMax<C>()); });
      case BinaryOp::Minimum:
        return binary_loop<T>(
            a, b, out, [](const auto& x, const auto& y) { return x.binaryExpr(y, NanMin<C>()); });
      case BinaryOp::Div:
        if constexpr (std::is_floating_point_v<C>)
          return binary_loop<T>(a, b, out, [](const auto& x, const auto& y) { return x / y; });
        break;
      case BinaryOp::Pow:
        if constexpr (std::is_floating_point_v<C>)
          return binary_loop<T>(a, b, out, [](const auto& x, const auto& y) {
            return x.binaryExpr(y, [](C u, C v) { return std::pow(u, v); });
          });
        break;
    }
  });
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_all(a.dtype(), name(op), [&]<typename T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    bool* po = out.data<bool>();
    for_each_run<3>(out.shape(), {&out.strides(), &a.strides(), &b.strides()},
                    [&](const auto& off, int64_t n, const auto& st) {
                      const T* x = pa + off[1];
                      const T* y = pb + off[2];
                      bool* o = po + off[0];
                      for (int64_t i = 0; i < n; ++i) {
                        const T u = x[i * st[1]], v = y[i * st[2]];
                        switch (op) {
                          case CompareOp::Eq:
                            o[i] = u == v;
                            break;
                          case CompareOp::Ne:
                            o[i] = u != v;
                            break;
                          case CompareOp::Lt:
                            o[i] = u < v;
                            break;
                          case CompareOp::Le:
                            o[i] = u <= v;
                            break;
                          case CompareOp::Gt:
                            o[i] = u > v;
                            break;
                          case CompareOp::Ge:
                            o[i] = u >= v;
                            break;
                        }
                      }
                    });
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_all(a.dtype(), "where", [&]<typename T>() {
    const bool* pc = cond.data<bool>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    for_each_run<4>(out.shape(), {&out.strides(), &cond.strides(), &a.strides(), &b.strides()},
                    [&](const auto& off, int64_t n, const auto& st) {
                      for (int64_t i = 0; i < n; ++i)
                        po[off[0] + i] = pc[off[1] + i * st[1]] ? pa[off[2] + i * st[2]]
                                                                : pb[off[3] + i * st[3]];
                    });
  });
}

}  // namespace tandem::cpu
