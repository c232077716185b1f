// core/kernels/cuda/elementwise.cu — unary, binary, comparison and where kernels on CUDA, the
// same ops and dtypes as cpu/elementwise.cpp (bfloat16 and float16 computed in float inside the
// kernel, in_float.cuh). Contiguous operands of the output's shape take a
// plain-index kernel (float32 unary/binary a float4 one); broadcast and strided views go through
// StridedIndex. One kernel per op (the op is a template functor), so no switch runs per element.
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/kernels/cuda/in_float.cuh>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <type_traits>

namespace tandem::cuda {
namespace {

template <UnaryOp Op>
struct UnaryFn {
  template <typename T>
  __device__ T operator()(T v) const {
    if constexpr (Op == UnaryOp::Neg) return -v;
    if constexpr (Op == UnaryOp::Exp) return d_exp(v);
    if constexpr (Op == UnaryOp::Log) return d_log(v);
    if constexpr (Op == UnaryOp::Sqrt) return d_sqrt(v);
    if constexpr (Op == UnaryOp::Abs) return d_abs(v);
    if constexpr (Op == UnaryOp::Relu) return v < T(0) ? T(0) : v;  // std::max(v, 0): NaN stays
    if constexpr (Op == UnaryOp::Sigmoid) return T(1) / (T(1) + d_exp(-v));
    if constexpr (Op == UnaryOp::Tanh) return d_tanh(v);
    if constexpr (Op == UnaryOp::Gelu)  // exact GELU, as the CPU: x/2·(1 + erf(x/√2))
      return T(0.5) * v * (T(1) + d_erf(v * T(0.70710678118654752440)));
    if constexpr (Op == UnaryOp::GeluTanh)  // x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
      return T(0.5) * v * (T(1) + d_tanh(T(0.7978845608028654) * (v + T(0.044715) * v * v * v)));
  }
};

template <BinaryOp Op>
struct BinaryFn {
  template <typename T>
  __device__ T operator()(T x, T y) const {
    if constexpr (Op == BinaryOp::Add) return x + y;
    if constexpr (Op == BinaryOp::Sub) return x - y;
    if constexpr (Op == BinaryOp::Mul) return x * y;
    if constexpr (Op == BinaryOp::Div) return x / y;
    if constexpr (Op == BinaryOp::Pow) return d_pow(x, y);
    // NaN if either operand is, as torch.maximum (and the CPU).
    if constexpr (Op == BinaryOp::Maximum) return d_max(x, y);
    if constexpr (Op == BinaryOp::Minimum) return d_min(x, y);
  }
};

template <CompareOp Op>
struct CompareFn {
  template <typename T>
  __device__ bool operator()(T x, T y) const {
    if constexpr (Op == CompareOp::Eq) return x == y;
    if constexpr (Op == CompareOp::Ne) return x != y;
    if constexpr (Op == CompareOp::Lt) return x < y;
    if constexpr (Op == CompareOp::Le) return x <= y;
    if constexpr (Op == CompareOp::Gt) return x > y;
    if constexpr (Op == CompareOp::Ge) return x >= y;
  }
};

// ---- kernels: contiguous, float4, strided ----

template <typename T, typename Op>
__global__ void unary_kernel(const T* x, T* y, int64_t n, Op op) {
  TD_GRID_STRIDE_LOOP(i, n) y[i] = op(x[i]);
}

template <typename Op>
__global__ void unary_vec4_kernel(const float4* x, float4* y, int64_t n4, Op op) {
  TD_GRID_STRIDE_LOOP(i, n4) {
    const float4 v = x[i];
    y[i] = make_float4(op(v.x), op(v.y), op(v.z), op(v.w));
  }
}

template <typename T, typename Op>
__global__ void unary_strided_kernel(const T* x, StridedIndex ix, T* y, int64_t n, Op op) {
  TD_GRID_STRIDE_LOOP(i, n) y[i] = op(x[ix.offset(i)]);
}

template <typename T, typename R, typename Op>
__global__ void binary_kernel(const T* a, const T* b, R* out, int64_t n, Op op) {
  TD_GRID_STRIDE_LOOP(i, n) out[i] = op(a[i], b[i]);
}

template <typename Op>
__global__ void binary_vec4_kernel(const float4* a, const float4* b, float4* out, int64_t n4,
                                   Op op) {
  TD_GRID_STRIDE_LOOP(i, n4) {
    const float4 u = a[i], v = b[i];
    out[i] = make_float4(op(u.x, v.x), op(u.y, v.y), op(u.z, v.z), op(u.w, v.w));
  }
}

template <typename T, typename R, typename Op>
__global__ void binary_strided_kernel(const T* a, StridedIndex ia, const T* b, StridedIndex ib,
                                      R* out, int64_t n, Op op) {
  TD_GRID_STRIDE_LOOP(i, n) out[i] = op(a[ia.offset(i)], b[ib.offset(i)]);
}

template <typename T>
__global__ void where_kernel(const bool* c, const T* a, const T* b, T* out, int64_t n) {
  TD_GRID_STRIDE_LOOP(i, n) out[i] = c[i] ? a[i] : b[i];
}

template <typename T>
__global__ void where_strided_kernel(const bool* c, StridedIndex ic, const T* a, StridedIndex ia,
                                     const T* b, StridedIndex ib, T* out, int64_t n) {
  TD_GRID_STRIDE_LOOP(i, n) out[i] = c[ic.offset(i)] ? a[ia.offset(i)] : b[ib.offset(i)];
}

// ---- launchers ----

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The float4 kernel for contiguous float32 of a multiple of 4 elements on 16-byte boundaries;
// false (nothing launched) otherwise.
template <typename T, typename Op>
bool unary_vec4(const T* x, T* y, int64_t n, Op op) {
  if constexpr (std::is_same_v<T, float>) {
    if (n % 4 != 0 || !aligned16(x) || !aligned16(y)) return false;
    unary_vec4_kernel<<<blocks_for(n / 4), kThreads, 0, stream()>>>(
        reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), n / 4, op);
    return true;
  }
  return false;
}

template <typename T, typename R, typename Op>
bool binary_vec4(const T* a, const T* b, R* out, int64_t n, Op op) {
  if constexpr (std::is_same_v<T, float> && std::is_same_v<R, float>) {
    if (n % 4 != 0 || !aligned16(a) || !aligned16(b) || !aligned16(out)) return false;
    binary_vec4_kernel<<<blocks_for(n / 4), kThreads, 0, stream()>>>(
        reinterpret_cast<const float4*>(a), reinterpret_cast<const float4*>(b),
        reinterpret_cast<float4*>(out), n / 4, op);
    return true;
  }
  return false;
}

// y[i] = op(x[i]); a 16-bit x computes in float (in_float.cuh).
template <typename T, typename Fn>
void run_unary(const Tensor& x, Tensor& y, Fn fn) {
  const InFloat<Fn> op{fn};
  const int64_t n = y.numel();
  if (n == 0) return;  // after dispatch, so a bad dtype still throws
  const T* px = x.data<T>();
  T* py = y.data<T>();
  if (!dense_like(x, y)) {
    unary_strided_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(px, StridedIndex(x, y.shape()),
                                                                   py, n, op);
  } else if (!unary_vec4<T>(px, py, n, op)) {
    unary_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(px, py, n, op);
  }
  TD_CUDA_CHECK_LAUNCH();
}

// out[i] = op(a[i], b[i]) with R = T (arithmetic) or bool (comparisons); 16-bit operands compute
// in float (in_float.cuh).
template <typename T, typename R, typename Fn>
void run_binary(const Tensor& a, const Tensor& b, Tensor& out, Fn fn) {
  const InFloat<Fn> op{fn};
  const int64_t n = out.numel();
  if (n == 0) return;
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  R* po = out.data<R>();
  if (!dense_like(a, out) || !dense_like(b, out)) {
    binary_strided_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
        pa, StridedIndex(a, out.shape()), pb, StridedIndex(b, out.shape()), po, n, op);
  } else if (!binary_vec4<T, R>(pa, pb, po, n, op)) {
    binary_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(pa, pb, po, n, op);
  }
  TD_CUDA_CHECK_LAUNCH();
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, Tensor& y) {
  check_output(y, name(op));
  DeviceGuard guard(y.device());
  if (x.dtype() == DType::i64 && (op == UnaryOp::Neg || op == UnaryOp::Abs)) {
    if (op == UnaryOp::Neg) return run_unary<int64_t>(x, y, UnaryFn<UnaryOp::Neg>{});
    return run_unary<int64_t>(x, y, UnaryFn<UnaryOp::Abs>{});
  }
  dispatch<FloatTypesWith16Bit>(x.dtype(), name(op), [&]<typename T>() {
    switch (op) {
      case UnaryOp::Neg:
        return run_unary<T>(x, y, UnaryFn<UnaryOp::Neg>{});
      case UnaryOp::Exp:
        return run_unary<T>(x, y, UnaryFn<UnaryOp::Exp>{});
      case UnaryOp::Log:
        return run_unary<T>(x, y, UnaryFn<UnaryOp::Log>{});
      case UnaryOp::Sqrt:
        return run_unary<T>(x, y, UnaryFn<UnaryOp::Sqrt>{});
      case UnaryOp::Abs:
        return run_unary<T>(x, y, UnaryFn<UnaryOp::Abs>{});
      case UnaryOp::Relu:
        return run_unary<T>(x, y, UnaryFn<UnaryOp::Relu>{});
      case UnaryOp::Sigmoid:
        return run_unary<T>(x, y, UnaryFn<UnaryOp::Sigmoid>{});
      case UnaryOp::Tanh:
        return run_unary<T>(x, y, UnaryFn<UnaryOp::Tanh>{});
      case UnaryOp::Gelu:
        return run_unary<T>(x, y, UnaryFn<UnaryOp::Gelu>{});
      case UnaryOp::GeluTanh:
        return run_unary<T>(x, y, UnaryFn<UnaryOp::GeluTanh>{});
    }
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (a.dtype() == DType::i64) {
    TD_CHECK_DTYPE(op != BinaryOp::Div && op != BinaryOp::Pow, name(op),
                   ": not defined for int64 tensors; convert with .to(kFloat32) first");
  }
  check_output(out, name(op));
  DeviceGuard guard(out.device());
  dispatch<NumericTypesWith16Bit>(a.dtype(), name(op), [&]<typename T>() {
    switch (op) {
      case BinaryOp::Add:
        return run_binary<T, T>(a, b, out, BinaryFn<BinaryOp::Add>{});
      case BinaryOp::Sub:
        return run_binary<T, T>(a, b, out, BinaryFn<BinaryOp::Sub>{});
      case BinaryOp::Mul:
        return run_binary<T, T>(a, b, out, BinaryFn<BinaryOp::Mul>{});
      case BinaryOp::Maximum:
        return run_binary<T, T>(a, b, out, BinaryFn<BinaryOp::Maximum>{});
      case BinaryOp::Minimum:
        return run_binary<T, T>(a, b, out, BinaryFn<BinaryOp::Minimum>{});
      case BinaryOp::Div:
        if constexpr (!std::is_same_v<T, int64_t>)
          return run_binary<T, T>(a, b, out, BinaryFn<BinaryOp::Div>{});
        break;
      case BinaryOp::Pow:
        if constexpr (!std::is_same_v<T, int64_t>)
          return run_binary<T, T>(a, b, out, BinaryFn<BinaryOp::Pow>{});
        break;
    }
  });
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  check_output(out, name(op));
  DeviceGuard guard(out.device());
  dispatch_all(a.dtype(), name(op), [&]<typename T>() {
    switch (op) {
      case CompareOp::Eq:
        return run_binary<T, bool>(a, b, out, CompareFn<CompareOp::Eq>{});
      case CompareOp::Ne:
        return run_binary<T, bool>(a, b, out, CompareFn<CompareOp::Ne>{});
      case CompareOp::Lt:
        return run_binary<T, bool>(a, b, out, CompareFn<CompareOp::Lt>{});
      case CompareOp::Le:
        return run_binary<T, bool>(a, b, out, CompareFn<CompareOp::Le>{});
      case CompareOp::Gt:
        return run_binary<T, bool>(a, b, out, CompareFn<CompareOp::Gt>{});
      case CompareOp::Ge:
        return run_binary<T, bool>(a, b, out, CompareFn<CompareOp::Ge>{});
    }
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  check_output(out, "where");
  DeviceGuard guard(out.device());
  dispatch_all(a.dtype(), "where", [&]<typename T>() {
    const int64_t n = out.numel();
    if (n == 0) return;
    const bool* pc = cond.data<bool>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    if (dense_like(cond, out) && dense_like(a, out) && dense_like(b, out)) {
      where_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(pc, pa, pb, po, n);
    } else {
      const Shape& s = out.shape();
      where_strided_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
          pc, StridedIndex(cond, s), pa, StridedIndex(a, s), pb, StridedIndex(b, s), po, n);
    }
    TD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::cuda
