// core/kernels/cuda/conv_algorithm.h — what conv.cu and conv_algorithm.cu share: cuDNN's
// descriptors of one convolution (owned, freed with it), the workspace as a device tensor, and the
// choice of algorithm for each pass, cached per (pass, device, dtype, shapes, params, mode): from
// cuDNN's heuristics, or with set_cudnn_benchmark(true) by timing every algorithm on the call's
// own tensors (PyTorch's torch.backends.cudnn.benchmark).
#pragma once

#include <cudnn.h>
#include <tandem/core/cuda/check.h>
#include <tandem/core/kernels/params.h>
#include <tandem/core/tensor.h>
#include <climits>

namespace tandem::cuda::conv {

// The most workspace an algorithm may ask for: past this a slower, leaner one is taken rather
// than crowding out activations.
constexpr size_t kMaxWorkspace = size_t(1) << 30;

inline int as_int(int64_t v) {
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
inline cudnnMathType_t base_math(cudnnDataType_t type) {
  if (type == CUDNN_DATA_HALF || type == CUDNN_DATA_BFLOAT16) return CUDNN_TENSOR_OP_MATH;
  return type == CUDNN_DATA_FLOAT ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

// What a convolution of `type` data accumulates in: float32 for the 16-bit types.
inline cudnnDataType_t compute_type(cudnnDataType_t type) {
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

enum class Pass : int64_t { Forward, BackwardData, BackwardFilter };

struct Algo {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;  // bytes
};

/// The algorithm for this pass, with the descriptor's math type set to match it (cuDNN selects
/// kernels by algorithm and math type together). `in` and `out` are the pass's data, which
/// benchmarking runs on: forward x → y, backward-data dy → dx, backward-filter dy → dw (x and w
/// are read too). cuDNN writes `out` while timing; the caller then computes it.
Algo algorithm(Pass pass, cudnnHandle_t h, const Conv& c, const Tensor& x, const Tensor& w,
               const Tensor& in, const Tensor& out, const Conv2dParams& p);

// Scratch memory for cuDNN as an int64 tensor (8-byte units), released when the caller's scope
// ends; the caching allocator hands a block back only to work on the same stream, after this.
inline Tensor workspace(size_t bytes, Device device) {
  if (bytes == 0) return Tensor();
  return empty({int64_t((bytes + 7) / 8)}, {.dtype = kInt64, .device = device});
}
inline void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

}  // namespace tandem::cuda::conv
