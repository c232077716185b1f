// core/kernels/cuda/conv.cu — 2-D convolution (NCHW, cross-correlation) through cuDNN's legacy
// API, groups and dilation included. The algorithm for each (pass, device, dtype, shapes, params)
// is chosen once from cuDNN's heuristics and cached; its workspace is a tensor on the device, so
// memory statistics count it. float32 runs on FMA kernels only (no TF32), so results match the CPU.
// bfloat16 and float16 run on the tensor cores with float32 accumulation (the descriptor's compute
// type); their bias add and bias gradient go through float32 (widen.h).
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/handles.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/widen.h>
#include <array>
#include <climits>
#include <map>
#include <mutex>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <type_traits>
#include <vector>

namespace tandem::cuda {
namespace {

// The most workspace an algorithm may ask for: past this a slower, leaner one is taken rather
// than crowding out activations.
constexpr size_t kMaxWorkspace = size_t(1) << 30;

int as_int(int64_t v) {
  TD_CHECK_VALUE(v <= INT_MAX, "conv2d: size ", v, " is larger than cuDNN's limit ", INT_MAX);
  return int(v);
}

// ---- descriptors, owned ----

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(cudnnDataType_t type, int64_t n, int64_t c, int64_t h, int64_t w) {
    TD_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    TD_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, type, as_int(n), as_int(c),
                                              as_int(h), as_int(w)));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(cudnnDataType_t type, const Tensor& w) {  // [Co, C/g, kH, kW]
    TD_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    TD_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, type, CUDNN_TENSOR_NCHW, as_int(w.size(0)),
                                              as_int(w.size(1)), as_int(w.size(2)),
                                              as_int(w.size(3))));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

// float: FMA kernels only, as CUDNN_DEFAULT_MATH allows TF32 on Ampere and later. double has no
// reduced-precision tensor-core path, so the default is exact. The 16-bit types are what the
// tensor cores are for.
cudnnMathType_t base_math(cudnnDataType_t type) {
  if (type == CUDNN_DATA_HALF || type == CUDNN_DATA_BFLOAT16) return CUDNN_TENSOR_OP_MATH;
  return type == CUDNN_DATA_FLOAT ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

// What a convolution of `type` data accumulates in: float32 for the 16-bit types.
cudnnDataType_t compute_type(cudnnDataType_t type) {
  return type == CUDNN_DATA_HALF || type == CUDNN_DATA_BFLOAT16 ? CUDNN_DATA_FLOAT : type;
}

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(cudnnDataType_t type, const Conv2dParams& p) {
    TD_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    // float accumulates in float and double in double, as on the CPU; 16 bits in float.
    TD_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        d, as_int(p.pad_h), as_int(p.pad_w), as_int(p.stride_h), as_int(p.stride_w),
        as_int(p.dilation_h), as_int(p.dilation_w), CUDNN_CROSS_CORRELATION, compute_type(type)));
    TD_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, as_int(p.groups)));
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(d, base_math(type)));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// Everything one convolution needs to describe itself to cuDNN.
struct Conv {
  cudnnDataType_t type;
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  Conv(cudnnDataType_t t, const Tensor& xt, const Tensor& wt, const Tensor& yt,
       const Conv2dParams& p)
      : type(t),
        x(t, xt.size(0), xt.size(1), xt.size(2), xt.size(3)),
        y(t, yt.size(0), yt.size(1), yt.size(2), yt.size(3)),
        w(t, wt),
        conv(t, p) {}
};

// ---- algorithm choice, cached ----

enum class Pass : int64_t { Forward, BackwardData, BackwardFilter };

struct Algo {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;  // bytes
};

using Key = std::array<int64_t, 19>;

Key key(Pass pass, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  Key k = {int64_t(pass), x.device().index(), int64_t(x.dtype()), p.stride_h, p.stride_w, p.pad_h,
           p.pad_w,       p.dilation_h,       p.dilation_w,       p.groups};
  for (int64_t d = 0; d < 4; ++d) k[size_t(10 + d)] = x.size(d), k[size_t(14 + d)] = w.size(d);
  k[18] = deterministic_convolutions();
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

// The first heuristic pick (they come best first) that runs, fits kMaxWorkspace and keeps full
// precision, preferring deterministic, non-FFT/Winograd algorithms (so runs repeat exactly and
// match the CPU closely) and falling back to any full-precision one; with
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

Algo find(Pass pass, cudnnHandle_t h, const Conv& c) {
  int count = 0, returned = 0;
  Algo a;
  TD_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.d, base_math(c.type)));
  if (pass == Pass::Forward) {
    TD_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(size_t(std::max(count, 1)));
    TD_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        h, c.x.d, c.w.d, c.conv.d, c.y.d, int(perf.size()), &returned, perf.data()));
    a = first_fit(perf, returned, c.type, "forward");
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.d, a.math));
    TD_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
        h, c.x.d, c.w.d, c.conv.d, c.y.d, cudnnConvolutionFwdAlgo_t(a.algo), &a.workspace));
  } else if (pass == Pass::BackwardData) {
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(size_t(std::max(count, 1)));
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, c.w.d, c.y.d, c.conv.d, c.x.d, int(perf.size()), &returned, perf.data()));
    a = first_fit(perf, returned, c.type, "backward-data");
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.d, a.math));
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
        h, c.w.d, c.y.d, c.conv.d, c.x.d, cudnnConvolutionBwdDataAlgo_t(a.algo), &a.workspace));
  } else {
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(size_t(std::max(count, 1)));
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, c.x.d, c.y.d, c.conv.d, c.w.d, int(perf.size()), &returned, perf.data()));
    a = first_fit(perf, returned, c.type, "backward-filter");
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.d, a.math));
    TD_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        h, c.x.d, c.y.d, c.conv.d, c.w.d, cudnnConvolutionBwdFilterAlgo_t(a.algo), &a.workspace));
  }
  return a;
}

// The cached algorithm for this pass, with the descriptor's math type set to match it (cuDNN
// selects kernels by algorithm and math type together).
Algo algorithm(Pass pass, cudnnHandle_t h, const Conv& c, const Tensor& x, const Tensor& w,
               const Conv2dParams& p) {
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
  const Algo a = find(pass, h, c);  // outside the lock: two threads may both look; same answer
  std::lock_guard lk(mu);
  cache.emplace(k, a);
  return a;
}

// Scratch memory for cuDNN as an int64 tensor (8-byte units), released when the caller's scope
// ends; the caching allocator hands a block back only to work on the same stream, after this.
Tensor workspace(size_t bytes, Device device) {
  if (bytes == 0) return Tensor();
  return empty({int64_t((bytes + 7) / 8)}, {.dtype = kInt64, .device = device});
}
void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

cudnnDataType_t cudnn_type(DType t, const char* op) {
  switch (t) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f64:
      return CUDNN_DATA_DOUBLE;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    case DType::f16:
      return CUDNN_DATA_HALF;
    default:
      ::tandem::detail::fail<DTypeError>(op, ": expected a floating dtype, but got ", t);
  }
}

// alpha = 1 and beta = 0 as cuDNN reads them: double for double data, float for the others.
struct Factors {
  float f[2] = {1, 0};
  double d[2] = {1, 0};
  bool dbl;
  explicit Factors(cudnnDataType_t t) : dbl(t == CUDNN_DATA_DOUBLE) {}
  const void* one() const { return dbl ? static_cast<const void*>(&d[0]) : &f[0]; }
  const void* zero() const { return dbl ? static_cast<const void*>(&d[1]) : &f[1]; }
};

bool is_16bit(cudnnDataType_t t) { return t == CUDNN_DATA_HALF || t == CUDNN_DATA_BFLOAT16; }

void zero(Tensor& t) {
  if (t.defined()) TD_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), stream()));
}

// cuDNN's tensor-op kernels want 16-byte aligned operands, but it picks the algorithm from the
// descriptors alone; an offset view (x.narrow(0, 1, n) in 16 bits with an odd C·H·W) can start
// anywhere. Such an operand is copied to fresh memory (the allocator's blocks are aligned).
Tensor aligned(const Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0) return t;
  Tensor copy = empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
  kernels(t.device()).copy(t, copy);
  return copy;
}

}  // namespace

void conv2d_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& b, Tensor& y,
                    const Conv2dParams& p) {
  if (y.numel() == 0) return;
  DeviceGuard guard(y.device());
  const Tensor x = aligned(x_in), w = aligned(w_in);
  const cudnnDataType_t type = cudnn_type(x.dtype(), "conv2d");
  cudnnHandle_t h = cudnn_handle(y.device().index());
  const Factors k(type);
  if (x.numel() == 0 || w.numel() == 0) {
    zero(y);  // all taps in padding, or no input channels: cuDNN takes no zero-size dims
  } else {
    const Conv c(type, x, w, y, p);
    const Algo a = algorithm(Pass::Forward, h, c, x, w, p);
    const Tensor ws = workspace(a.workspace, y.device());
    TD_CUDNN_CHECK(cudnnConvolutionForward(h, k.one(), c.x.d, x.data_ptr(), c.w.d, w.data_ptr(),
                                           c.conv.d, cudnnConvolutionFwdAlgo_t(a.algo), ptr(ws),
                                           a.workspace, k.zero(), c.y.d, y.data_ptr()));
  }
  if (!b.defined()) return;
  if (is_16bit(type)) {  // y += b broadcast over N, H, W, computed in float32
    const Tensor bb = ::tandem::detail::as_strided(b, y.shape(), {0, 1, 0, 0}, b.storage_offset());
    kernels(y.device()).binary(BinaryOp::Add, y, bb, y);
    return;
  }
  const TensorDesc bd(type, 1, b.numel(), 1, 1);
  const TensorDesc yd(type, y.size(0), y.size(1), y.size(2), y.size(3));
  TD_CUDNN_CHECK(cudnnAddTensor(h, k.one(), bd.d, b.data_ptr(), k.one(), yd.d, y.data_ptr()));
}

void conv2d_backward(const Tensor& x_in, const Tensor& w_in, const Tensor& dy_in, Tensor& dx,
                     Tensor& dw, Tensor& db, const Conv2dParams& p) {
  DeviceGuard guard(dy_in.device());
  const Tensor x = aligned(x_in), w = aligned(w_in), dy = aligned(dy_in);
  if (dy.numel() == 0) {  // N == 0 or Co == 0: every gradient is an empty sum
    zero(dx);
    zero(dw);
    zero(db);
    return;
  }
  const cudnnDataType_t type = cudnn_type(x.dtype(), "conv2d_backward");
  cudnnHandle_t h = cudnn_handle(dy.device().index());
  const Factors k(type);
  if (db.defined()) {  // db = Σ over (n, oy, ox) of dy; for 16 bits summed in float32
    const bool wide = is_16bit(type);
    const Tensor g = wide ? ::tandem::detail::widen(dy) : dy;
    Tensor sum = wide ? empty(db.shape(), {.dtype = DType::f32, .device = db.device()}) : db;
    const cudnnDataType_t st = wide ? CUDNN_DATA_FLOAT : type;
    const TensorDesc dyd(st, dy.size(0), dy.size(1), dy.size(2), dy.size(3));
    const TensorDesc bd(st, 1, db.numel(), 1, 1);
    TD_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, k.one(), dyd.d, g.data_ptr(), k.zero(), bd.d,
                                                sum.data_ptr()));
    if (wide) kernels(db.device()).copy(sum, db);
  }
  if (!dx.defined() && !dw.defined()) return;
  if (x.numel() == 0 || w.numel() == 0) {  // no products: what gradients exist are zero
    zero(dx);
    zero(dw);
    return;
  }
  const Conv c(type, x, w, dy, p);  // dy has y's shape
  if (dx.defined()) {               // dx = the adjoint of the convolution in x, applied to dy
    const Algo a = algorithm(Pass::BackwardData, h, c, x, w, p);
    const Tensor ws = workspace(a.workspace, dy.device());
    TD_CUDNN_CHECK(cudnnConvolutionBackwardData(h, k.one(), c.w.d, w.data_ptr(), c.y.d,
                                                dy.data_ptr(), c.conv.d,
                                                cudnnConvolutionBwdDataAlgo_t(a.algo), ptr(ws),
                                                a.workspace, k.zero(), c.x.d, dx.data_ptr()));
  }
  if (dw.defined()) {  // dw = Σ over the batch of dy correlated with x
    const Algo a = algorithm(Pass::BackwardFilter, h, c, x, w, p);
    const Tensor ws = workspace(a.workspace, dy.device());
    TD_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, k.one(), c.x.d, x.data_ptr(), c.y.d,
                                                  dy.data_ptr(), c.conv.d,
                                                  cudnnConvolutionBwdFilterAlgo_t(a.algo), ptr(ws),
                                                  a.workspace, k.zero(), c.w.d, dw.data_ptr()));
  }
}

}  // namespace tandem::cuda
