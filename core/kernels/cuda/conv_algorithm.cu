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
#include <optional>
#include <vector>

namespace tandem::cuda::conv {
namespace {

using Key = std::array<int64_t, 20>;

Key key(Pass pass, const Tensor& x, const Tensor& w, const Conv2dParams& p, bool benchmark) {
  Key k = {int64_t(pass), x.device().index(), int64_t(x.dtype()), p.stride_h, p.stride_w, p.pad_h,
           p.pad_w,       p.dilation_h,       p.dilation_w,       p.groups};
  for (int64_t d = 0; d < 4; ++d) k[size_t(10 + d)] = x.size(d), k[size_t(14 + d)] = w.size(d);
  k[18] = deterministic_convolutions();
  k[19] = benchmark;
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

// Deterministic and without FFT or Winograd: runs repeat bit for bit and stay close to the CPU.
template <typename Perf>
bool preferred(const Perf& r) {
  return r.determinism == CUDNN_DETERMINISTIC && !lossy(r.algo);
}

// The first candidate (heuristic picks come best first, timed ones fastest first) that runs, fits
// kMaxWorkspace and keeps full precision, preferring preferred() ones and falling back to any
// full-precision one; with deterministic_convolutions() off, the first full-precision one
// (PyTorch's default choice). For float the FMA math type requested on the descriptor is kept
// where cuDNN reports the default, which would allow TF32; timed, only results timed with FMA
// count (cuDNN also times the default math, whose TF32 kernels would win the race). Tensor-op
// results are skipped. None: nothing fits.
template <typename Perf>
std::optional<Algo> first_fit(const std::vector<Perf>& perf, int returned, cudnnDataType_t type,
                              bool timed) {
  for (const bool strict : {true, false}) {
    if (strict && !deterministic_convolutions()) continue;
    for (int i = 0; i < returned; ++i) {
      const Perf& r = perf[size_t(i)];
      const bool exact =
          type == CUDNN_DATA_FLOAT
              ? r.mathType == CUDNN_FMA_MATH || (!timed && r.mathType == CUDNN_DEFAULT_MATH)
              : r.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
      if (r.status == CUDNN_STATUS_SUCCESS && r.memory <= kMaxWorkspace && exact &&
          (preferred(r) || !strict))
        return Algo{int(r.algo), type == CUDNN_DATA_FLOAT ? CUDNN_FMA_MATH : r.mathType, 0};
    }
  }
  return std::nullopt;
}

// The workspace timing needs: the largest any candidate that could be picked asks for, up to
// kMaxWorkspace (under deterministic_convolutions(), FFT's large ones are not among them).
template <typename Perf>
size_t largest_workspace(const std::vector<Perf>& perf, int returned) {
  size_t bytes = 0;
  for (int i = 0; i < returned; ++i) {
    const Perf& r = perf[size_t(i)];
    if (r.status == CUDNN_STATUS_SUCCESS && r.memory <= kMaxWorkspace &&
        (preferred(r) || !deterministic_convolutions()))
      bytes = std::max(bytes, r.memory);
  }
  return bytes;
}

// The pick among cuDNN's heuristic candidates `perf`; with `timed`, among every algorithm run on
// the call's tensors and timed, fastest first (time(workspace, bytes, results, capacity,
// &returned) calls cudnnFind*AlgorithmEx, which waits for the GPU), falling back to the heuristic
// pick where timing cannot be done (no memory for its workspace) or times nothing that fits.
template <typename Perf, typename Time>
Algo pick(const std::vector<Perf>& perf, int returned, cudnnDataType_t type, bool timed,
          Device device, const char* pass, Time time) {
  if (timed) {
    note_host_sync("conv2d: timing cuDNN's algorithms (set_cudnn_benchmark)");
    std::optional<Algo> fastest;
    try {
      const size_t bytes = largest_workspace(perf, returned);
      const Tensor ws = workspace(bytes, device);
      std::vector<Perf> results(perf.size());
      int timed_count = 0;
      time(ptr(ws), bytes, results.data(), int(results.size()), &timed_count);
      fastest = first_fit(results, timed_count, type, true);
    } catch (const std::exception&) {  // the workspace did not fit, or cuDNN could not time
    }
    if (fastest) return *fastest;
  }
  if (const std::optional<Algo> a = first_fit(perf, returned, type, false)) return *a;
  ::tandem::detail::fail<CudaError>("conv2d: cuDNN offers no full-precision ", pass,
                                    " algorithm within ", kMaxWorkspace >> 20,
                                    " MiB of workspace (", returned, " candidates)");
}

// cuDNN's heuristic candidates for the pass, then pick(); the descriptor's math type is left set
// to the pick's, and its workspace size filled in.
Algo find(Pass pass, cudnnHandle_t h, const Conv& c, const Tensor& x, const Tensor& w,
          const Tensor& in, const Tensor& out, bool timed) {
  int count = 0, returned = 0;
  Algo a;
  const Device device = out.device();
  TD_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.d, base_math(c.type)));
  if (pass == Pass::Forward) {
    TD_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(size_t(std::max(count, 1)));
    TD_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        h, c.x.d, c.w.d, c.conv.d, c.y.d, int(perf.size()), &returned, perf.data()));
    a = pick(perf, returned, c.type, timed, device, "forward",
             [&](void* ws, size_t bytes, cudnnConvolutionFwdAlgoPerf_t* r, int n, int* got) {
               TD_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
                   h, c.x.d, in.data_ptr(), c.w.d, w.data_ptr(), c.conv.d, c.y.d, out.data_ptr(), n,
                   got, r, ws, bytes));
             });
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.d, a.math));
    TD_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
        h, c.x.d, c.w.d, c.conv.d, c.y.d, cudnnConvolutionFwdAlgo_t(a.algo), &a.workspace));
  } else if (pass == Pass::BackwardData) {
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(size_t(std::max(count, 1)));
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, c.w.d, c.y.d, c.conv.d, c.x.d, int(perf.size()), &returned, perf.data()));
    a = pick(perf, returned, c.type, timed, device, "backward-data",
             [&](void* ws, size_t bytes, cudnnConvolutionBwdDataAlgoPerf_t* r, int n, int* got) {
               TD_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
                   h, c.w.d, w.data_ptr(), c.y.d, in.data_ptr(), c.conv.d, c.x.d, out.data_ptr(), n,
                   got, r, ws, bytes));
             });
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.d, a.math));
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
        h, c.w.d, c.y.d, c.conv.d, c.x.d, cudnnConvolutionBwdDataAlgo_t(a.algo), &a.workspace));
  } else {
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(size_t(std::max(count, 1)));
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, c.x.d, c.y.d, c.conv.d, c.w.d, int(perf.size()), &returned, perf.data()));
    a = pick(perf, returned, c.type, timed, device, "backward-filter",
             [&](void* ws, size_t bytes, cudnnConvolutionBwdFilterAlgoPerf_t* r, int n, int* got) {
               TD_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
                   h, c.x.d, x.data_ptr(), c.y.d, in.data_ptr(), c.conv.d, c.w.d, out.data_ptr(), n,
                   got, r, ws, bytes));
             });
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
  const bool benchmark = cudnn_benchmark();  // read once: the key and the pick agree
  const Key k = key(pass, x, w, p, benchmark);
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
  const bool capturing =
      benchmark && ::tandem::cuda::detail::current_stream_is_capturing(out.device().index());
  // Outside the lock: two threads may both look (timed, their answers may differ; either is fine).
  const Algo a = find(pass, h, c, x, w, in, out, benchmark && !capturing);
  if (!capturing) {
    std::lock_guard lk(mu);
    cache.emplace(k, a);
  }
  return a;
}

}  // namespace tandem::cuda::conv
