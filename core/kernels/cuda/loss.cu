// core/kernels/cuda/loss.cu — fused softmax cross-entropy and NLL over class indices, the CUDA side
// of cpu/loss.cpp: loss_i = lse_i − (1 − ε)·x[i, t] − ε/C·Σ_j x[i, j], gradient softmax − target.
// A bad target is found on the device (the lowest bad row, by atomicMin) and reported from the
// host with the CPU's IndexError message, which costs one synchronisation per forward.
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <limits>
#include <tandem/core/kernels/cuda/bad_index.cuh>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <tandem/core/kernels/cuda/row_reduce.cuh>
#include <type_traits>

namespace tandem::cuda {
namespace {

using Flag = IndexFlag;

// loss_i and lse_i, a group of G threads per row. Rows with a bad target lower *bad to their index
// and write no loss (the launcher throws).
template <int G, typename T>
__global__ void cross_entropy_forward_kernel(const T* x, const int64_t* target, T* loss, T* lse,
                                             int64_t n, int64_t c, int64_t ignore_index, T eps,
                                             Flag* bad) {
  const int lane = int(threadIdx.x % G);
  const int64_t first = blockIdx.x * int64_t(blockDim.x / G) + threadIdx.x / G;
  for (int64_t i = first; i < n; i += int64_t(gridDim.x) * (blockDim.x / G)) {
    const T* row = x + i * c;
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t j = lane; j < c; j += G) mx = max_of(mx, row[j]);
    mx = group_reduce<G>(mx, MaxOp{});
    T sum_exp = T(0), sum = T(0);
    for (int64_t j = lane; j < c; j += G) {
      sum_exp += d_exp(row[j] - mx);
      sum += row[j];
    }
    const T l = mx + d_log(group_reduce<G>(sum_exp, SumOp{}));
    if (eps > 0) sum = group_reduce<G>(sum, SumOp{});  // eps is the same for every thread
    if (lane == 0) {
      lse[i] = l;
      const int64_t t = target[i];
      if (t == ignore_index)
        loss[i] = T(0);
      else if (t < 0 || t >= c)
        atomicMin(bad, Flag(i));
      else
        loss[i] = l - (T(1) - eps) * row[t] - (eps > 0 ? eps / T(c) * sum : T(0));
    }
  }
}

// dlogits[i, j] = dloss_i · (e^(x_ij − lse_i) − ε/C) − [j = t_i]·(1 − ε)·dloss_i; 0 for ignored
// rows. A target out of range (the forward threw on it) only loses its one-hot term.
template <typename T>
__global__ void cross_entropy_backward_kernel(const T* x, const int64_t* target, const T* lse,
                                              const T* dloss, T* dx, int64_t n, int64_t c,
                                              int64_t ignore_index, T eps) {
  TD_GRID_STRIDE_LOOP(idx, n * c) {
    const int64_t i = idx / c, j = idx - i * c, t = target[i];
    if (t == ignore_index) {
      dx[idx] = T(0);
      continue;
    }
    const T g = dloss[i];
    T v = (d_exp(x[idx] - lse[i]) - eps / T(c)) * g;
    if (j == t) v -= (T(1) - eps) * g;
    dx[idx] = v;
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
  dispatch_float(logits.dtype(), "cross_entropy", [&]<typename T>() {
    const auto launch = [&]<int G>(unsigned grid) {
      cross_entropy_forward_kernel<G, T><<<grid, kThreads, 0, stream()>>>(
          logits.data<T>(), target.data<int64_t>(), loss.data<T>(), lse.data<T>(), n, c,
          p.ignore_index, T(p.label_smoothing), bad.get());
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
  dispatch_float(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
    cross_entropy_backward_kernel<T><<<blocks_for(n * c), kThreads, 0, stream()>>>(
        logits.data<T>(), target.data<int64_t>(), lse.data<T>(), dloss.data<T>(), dlogits.data<T>(),
        n, c, p.ignore_index, T(p.label_smoothing));
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
