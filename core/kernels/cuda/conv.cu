// core/kernels/cuda/conv.cu — 2-D convolution (NCHW, cross-correlation) through cuDNN's legacy
// API, groups and dilation included. The algorithm for each (pass, device, dtype, shapes, params)
// is chosen once and cached (conv_algorithm.cu); its workspace is a tensor on the device, so
// memory statistics count it. float32 runs on FMA kernels only (no TF32), so results match the CPU.
// bfloat16 and float16 run on the tensor cores with float32 accumulation (the descriptor's compute
// type); their bias add and bias gradient go through float32 (widen.h).
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/conv_algorithm.h>
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

using namespace conv;

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
    const Algo a = algorithm(Pass::Forward, h, c, x, w, x, y, p);
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
    const Algo a = algorithm(Pass::BackwardData, h, c, x, w, dy, dx, p);
    const Tensor ws = workspace(a.workspace, dy.device());
    TD_CUDNN_CHECK(cudnnConvolutionBackwardData(h, k.one(), c.w.d, w.data_ptr(), c.y.d,
                                                dy.data_ptr(), c.conv.d,
                                                cudnnConvolutionBwdDataAlgo_t(a.algo), ptr(ws),
                                                a.workspace, k.zero(), c.x.d, dx.data_ptr()));
  }
  if (dw.defined()) {  // dw = Σ over the batch of dy correlated with x
    const Algo a = algorithm(Pass::BackwardFilter, h, c, x, w, dy, dw, p);
    const Tensor ws = workspace(a.workspace, dy.device());
    TD_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, k.one(), c.x.d, x.data_ptr(), c.y.d,
                                                  dy.data_ptr(), c.conv.d,
                                                  cudnnConvolutionBwdFilterAlgo_t(a.algo), ptr(ws),
                                                  a.workspace, k.zero(), c.w.d, dw.data_ptr()));
  }
}

}  // namespace tandem::cuda
