// core/kernels/cuda/loss.cu — fused softmax cross-entropy and NLL over class indices, the CUDA side
// of cpu/loss.cpp: loss_i = lse_i − (1 − ε)·x[i, t] − ε/C·Σ_j x[i, j], gradient softmax − target.
// 16-bit logits are read in place and widened element by element; the loss and log-sum-exp are
// float32 (cpu/loss.cpp says why). A bad target is found on the device (the lowest bad row, by
// atomicMin) and reported at the next sync point with the CPU's IndexError message.
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <limits>
#include <tandem/core/kernels/cuda/bad_index.cuh>
#include <tandem/core/kernels/cuda/in_float.cuh>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <tandem/core/kernels/cuda/row_reduce.cuh>
#include <type_traits>

namespace tandem::cuda {
namespace {

using Flag = IndexFlag;

// loss_i and lse_i, a group of G threads per row. Rows with a bad target lower *bad to their index
// and write no loss (the launcher throws). T is the logits' type, C the one the row's sums run in
// (float for 16-bit logits, read and widened element by element: no float32 copy of the logits).
template <int G, typename T, typename C>
__global__ void cross_entropy_forward_kernel(const T* x, const int64_t* target, C* loss, C* lse,
                                             int64_t n, int64_t c, int64_t ignore_index, C eps,
                                             Flag* bad) {
  const int lane = int(threadIdx.x % G);
  const int64_t first = blockIdx.x * int64_t(blockDim.x / G) + threadIdx.x / G;
  for (int64_t i = first; i < n; i += int64_t(gridDim.x) * (blockDim.x / G)) {
    const T* row = x + i * c;
    C mx = -std::numeric_limits<C>::infinity();
    for (int64_t j = lane; j < c; j += G) mx = max_of(mx, C(row[j]));
    mx = group_reduce<G>(mx, MaxOp{});
    C sum_exp = C(0), sum = C(0);
    for (int64_t j = lane; j < c; j += G) {
      const C v = C(row[j]);
      sum_exp += d_exp(v - mx);
      sum += v;
    }
    const C l = mx + d_log(group_reduce<G>(sum_exp, SumOp{}));
    if (eps > 0) sum = group_reduce<G>(sum, SumOp{});  // eps is the same for every thread
    if (lane == 0) {
      lse[i] = l;
      const int64_t t = target[i];
      if (t == ignore_index)
        loss[i] = C(0);
      else if (t < 0 || t >= c)
        atomicMin(bad, Flag(i));
      else
        loss[i] = l - (C(1) - eps) * C(row[t]) - (eps > 0 ? eps / C(c) * sum : C(0));
    }
  }
}

// dlogits[i, j] = dloss_i · (e^(x_ij − lse_i) − ε/C) − [j = t_i]·(1 − ε)·dloss_i; 0 for ignored
// rows, computed in C and rounded once into T. A target out of range (the forward threw on it)
// only loses its one-hot term.
template <typename T, typename C>
__global__ void cross_entropy_backward_kernel(const T* x, const int64_t* target, const C* lse,
                                              const C* dloss, T* dx, int64_t n, int64_t c,
                                              int64_t ignore_index, C eps) {
  TD_GRID_STRIDE_LOOP(idx, n * c) {
    const int64_t i = idx / c, j = idx - i * c, t = target[i];
    if (t == ignore_index) {
      dx[idx] = T(0.0f);
      continue;
    }
    const C g = dloss[i];
    C v = (d_exp(C(x[idx]) - lse[i]) - eps / C(c)) * g;
    if (j == t) v -= (C(1) - eps) * g;
    dx[idx] = T(v);
  }
}

// loss_i = −log_probs[i, t_i] (0 for ignored rows)
template <typename T>
__global__ void nll_loss_forward_kernel(const T* x, const int64_t* target, T* loss, int64_t n,
                                        int64_t c, int64_t ignore_index, Flag* bad) {
  TD_GRID_STRIDE_LOOP(i, n) {
    const int64_t t = target[i];
    if (t == ignore_index)
      loss[i] = T(0);
    else if (t < 0 || t >= c)
      atomicMin(bad, Flag(i));
    else
      loss[i] = -x[i * c + t];
  }
}

// dlog_probs[i, j] = −dloss_i·[j = t_i]
template <typename T>
__global__ void nll_loss_backward_kernel(const int64_t* target, const T* dloss, T* dx, int64_t n,
                                         int64_t c, int64_t ignore_index) {
  TD_GRID_STRIDE_LOOP(idx, n * c) {
    const int64_t i = idx / c, t = target[i];
    dx[idx] = t != ignore_index && idx - i * c == t ? -dloss[i] : T(0);
  }
}

// The CPU's IndexError for the first row whose target is out of range, at the next sync point.
void check_targets(const BadIndex& bad, const char* op, const Tensor& target, int64_t classes) {
  bad.report_later(target, [op, classes](int64_t at, int64_t value) {
    return str(op, ": target value ", value, " at index ", at, " is out of range [0, ", classes,
               ")");
  });
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& target, Tensor& loss, Tensor& lse,
                           const ClassLossParams& p) {
  const int64_t n = logits.size(0), c = logits.size(1);
  if (n == 0) return;
  DeviceGuard guard(loss.device());
  BadIndex bad(loss.device());
  dispatch<FloatTypesWith16Bit>(logits.dtype(), "cross_entropy", [&]<typename T>() {
    using C = compute_t<T>;
    const auto launch = [&]<int G>(unsigned grid) {
      cross_entropy_forward_kernel<G, T, C><<<grid, kThreads, 0, stream()>>>(
          logits.data<T>(), target.data<int64_t>(), loss.data<C>(), lse.data<C>(), n, c,
          p.ignore_index, C(p.label_smoothing), bad.get());
    };
    if (c <= kWarpRowMax)
      launch.template operator()<kWarp>(blocks_for(n * kWarp));
    else
      launch.template operator()<kThreads>(unsigned(std::min<int64_t>(n, 65535 * 8)));
    TD_CUDA_CHECK_LAUNCH();
  });
  check_targets(bad, "cross_entropy", target, c);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits, const ClassLossParams& p) {
  const int64_t n = logits.size(0), c = logits.size(1);
  if (n * c == 0) return;
  DeviceGuard guard(dlogits.device());
  dispatch<FloatTypesWith16Bit>(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
    using C = compute_t<T>;
    cross_entropy_backward_kernel<T, C><<<blocks_for(n * c), kThreads, 0, stream()>>>(
        logits.data<T>(), target.data<int64_t>(), lse.data<C>(), dloss.data<C>(), dlogits.data<T>(),
        n, c, p.ignore_index, C(p.label_smoothing));
    TD_CUDA_CHECK_LAUNCH();
  });
}

void nll_loss_forward(const Tensor& log_probs, const Tensor& target, Tensor& loss,
                      const ClassLossParams& p) {
  const int64_t n = log_probs.size(0), c = log_probs.size(1);
  if (n == 0) return;
  DeviceGuard guard(loss.device());
  BadIndex bad(loss.device());
  dispatch_float(log_probs.dtype(), "nll_loss", [&]<typename T>() {
    nll_loss_forward_kernel<T>
        <<<blocks_for(n), kThreads, 0, stream()>>>(log_probs.data<T>(), target.data<int64_t>(),
                                                   loss.data<T>(), n, c, p.ignore_index, bad.get());
    TD_CUDA_CHECK_LAUNCH();
  });
  check_targets(bad, "nll_loss", target, c);
}

void nll_loss_backward(const Tensor& target, const Tensor& dloss, Tensor& dlog_probs,
                       const ClassLossParams& p) {
  const int64_t n = dlog_probs.size(0), c = dlog_probs.size(1);
  if (n * c == 0) return;
  DeviceGuard guard(dlog_probs.device());
  dispatch_float(dlog_probs.dtype(), "nll_loss_backward", [&]<typename T>() {
    nll_loss_backward_kernel<T><<<blocks_for(n * c), kThreads, 0, stream()>>>(
        target.data<int64_t>(), dloss.data<T>(), dlog_probs.data<T>(), n, c, p.ignore_index);
    TD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::cuda
