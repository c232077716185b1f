// core/kernels/cuda/conv_algorithm.cu — which cuDNN algorithm each convolution pass runs, chosen
// once per (pass, device, dtype, shapes, params, mode) and cached. By default cuDNN's heuristics
// rank the candidates; with set_cudnn_benchmark(true) (PyTorch's torch.backends.cudnn.benchmark)
// every algorithm is run on the call's own tensors and timed, the first call of each shape paying
// for it. Either way the pick keeps full precision (float32 on FMA kernels, never TF32) and, while
// deterministic_convolutions() holds, a deterministic algorithm without FFT or Winograd.
#include <tandem/core/check.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/conv_algorithm.h>
#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <vector>

namespace tandem::cuda::conv {
namespace {

using Key = std::array<int64_t, 20>;

Key key(Pass pass, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  Key k = {int64_t(pass), x.device().index(), int64_t(x.dtype()), p.stride_h, p.stride_w, p.pad_h,
           p.pad_w,       p.dilation_h,       p.dilation_w,       p.groups};
  for (int64_t d = 0; d < 4; ++d) k[size_t(10 + d)] = x.size(d), k[size_t(14 + d)] = w.size(d);
  k[18] = deterministic_convolutions();
  k[19] = cudnn_benchmark();
  return k;
}

// FFT and Winograd algorithms trade accuracy for speed; results should match the CPU's.
bool lossy(cudnnConvolutionFwdAlgo_t a) {
  return a >= CUDNN_CONVOLUTION_FWD_ALGO_FFT && a <= CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool lossy(cudnnConvolutionBwdDataAlgo_t a) {
  return a >= CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT &&
         a <= CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool lossy(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// The first candidate (heuristic picks come best first, timed ones fastest first) that runs, fits
// kMaxWorkspace and keeps full precision, preferring deterministic, non-FFT/Winograd algorithms (so
// runs repeat exactly and match the CPU closely) and falling back to any full-precision one; with
// deterministic_convolutions() off, the first full-precision one (PyTorch's default choice). For
// float the FMA math type requested on the descriptor is kept even where cuDNN reports the default
// (which would allow TF32); tensor-op results are skipped.
template <typename Perf>
Algo first_fit(const std::vector<Perf>& perf, int returned, cudnnDataType_t type,
               const char* pass) {
  for (const bool strict : {true, false}) {
    if (strict && !deterministic_convolutions()) continue;
    for (int i = 0; i < returned; ++i) {
      const Perf& r = perf[size_t(i)];
      const bool exact = type == CUDNN_DATA_FLOAT
                             ? r.mathType == CUDNN_FMA_MATH || r.mathType == CUDNN_DEFAULT_MATH
                             : r.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
      const bool preferred = r.determinism == CUDNN_DETERMINISTIC && !lossy(r.algo);
      if (r.status == CUDNN_STATUS_SUCCESS && r.memory <= kMaxWorkspace && exact &&
          (preferred || !strict))
        return {int(r.algo), type == CUDNN_DATA_FLOAT ? CUDNN_FMA_MATH : r.mathType, 0};
    }
  }
  ::tandem::detail::fail<CudaError>("conv2d: cuDNN offers no full-precision ", pass,
                                    " algorithm within ", kMaxWorkspace >> 20,
                                    " MiB of workspace (", returned, " candidates)");
}

// The largest workspace a candidate that runs asks for, up to kMaxWorkspace: what timing them all
// needs.
template <typename Perf>
size_t largest_workspace(const std::vector<Perf>& perf, int returned) {
  size_t bytes = 0;
  for (int i = 0; i < returned; ++i)
    if (perf[size_t(i)].status == CUDNN_STATUS_SUCCESS && perf[size_t(i)].memory <= kMaxWorkspace)
      bytes = std::max(bytes, perf[size_t(i)].memory);
  return bytes;
}

// cuDNN's heuristic candidates for the pass; with `timed`, then every algorithm run on the call's
// tensors and timed, fastest first (cudnnFind*AlgorithmEx, which synchronises the device), in a
// workspace as large as the hungriest heuristic candidate's. Then first_fit.
Algo find(Pass pass, cudnnHandle_t h, const Conv& c, const Tensor& x, const Tensor& w,
          const Tensor& in, const Tensor& out, bool timed) {
  int count = 0, returned = 0;
  Algo a;
  TD_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.d, base_math(c.type)));
  if (pass == Pass::Forward) {
    TD_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(size_t(std::max(count, 1)));
    TD_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        h, c.x.d, c.w.d, c.conv.d, c.y.d, int(perf.size()), &returned, perf.data()));
    if (timed) {
      const size_t bytes = largest_workspace(perf, returned);
      const Tensor ws = workspace(bytes, out.device());
      TD_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
          h, c.x.d, in.data_ptr(), c.w.d, w.data_ptr(), c.conv.d, c.y.d, out.data_ptr(),
          int(perf.size()), &returned, perf.data(), ptr(ws), bytes));
    }
    a = first_fit(perf, returned, c.type, "forward");
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.d, a.math));
    TD_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
        h, c.x.d, c.w.d, c.conv.d, c.y.d, cudnnConvolutionFwdAlgo_t(a.algo), &a.workspace));
  } else if (pass == Pass::BackwardData) {
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(size_t(std::max(count, 1)));
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, c.w.d, c.y.d, c.conv.d, c.x.d, int(perf.size()), &returned, perf.data()));
    if (timed) {
      const size_t bytes = largest_workspace(perf, returned);
      const Tensor ws = workspace(bytes, out.device());
      TD_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
          h, c.w.d, w.data_ptr(), c.y.d, in.data_ptr(), c.conv.d, c.x.d, out.data_ptr(),
          int(perf.size()), &returned, perf.data(), ptr(ws), bytes));
    }
    a = first_fit(perf, returned, c.type, "backward-data");
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.d, a.math));
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
        h, c.w.d, c.y.d, c.conv.d, c.x.d, cudnnConvolutionBwdDataAlgo_t(a.algo), &a.workspace));
  } else {
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(size_t(std::max(count, 1)));
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, c.x.d, c.y.d, c.conv.d, c.w.d, int(perf.size()), &returned, perf.data()));
    if (timed) {
      const size_t bytes = largest_workspace(perf, returned);
      const Tensor ws = workspace(bytes, out.device());
      TD_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          h, c.x.d, x.data_ptr(), c.y.d, in.data_ptr(), c.conv.d, c.w.d, out.data_ptr(),
          int(perf.size()), &returned, perf.data(), ptr(ws), bytes));
    }
    a = first_fit(perf, returned, c.type, "backward-filter");
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.d, a.math));
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        h, c.x.d, c.y.d, c.conv.d, c.w.d, cudnnConvolutionBwdFilterAlgo_t(a.algo), &a.workspace));
  }
  return a;
}

}  // namespace

Algo algorithm(Pass pass, cudnnHandle_t h, const Conv& c, const Tensor& x, const Tensor& w,
               const Tensor& in, const Tensor& out, const Conv2dParams& p) {
  static std::mutex mu;
  static std::map<Key, Algo> cache;
  const Key k = key(pass, x, w, p);
  {
    std::lock_guard lk(mu);
    const auto it = cache.find(k);
    if (it != cache.end()) {
      TD_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.d, it->second.math));
      return it->second;
    }
  }
  // Timing runs kernels and waits for them, which a stream being captured into a CUDA graph
  // cannot: there the heuristic's pick, left out of the cache so the next eager call times.
  const bool capturing = ::tandem::cuda::detail::current_stream_is_capturing(out.device().index());
  const bool timed = cudnn_benchmark() && !capturing;
  // Outside the lock: two threads may both look (timed, their answers may differ; either is fine).
  const Algo a = find(pass, h, c, x, w, in, out, timed);
  if (timed || !cudnn_benchmark()) {
    std::lock_guard lk(mu);
    cache.emplace(k, a);
  }
  return a;
}

}  // namespace tandem::cuda::conv
