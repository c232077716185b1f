// core/kernels/cuda/batch_norm.cu — training-mode batch normalisation by cuDNN (what PyTorch runs
// on a GPU): one kernel for the statistics, the output and the running averages, one for the three
// gradients, instead of the ten elementwise passes and reductions of the composed ops. x [N, C, S]
// is described to cuDNN as NCHW [N, C, S, 1] in its spatial mode (statistics over N, H and W).
// cuDNN 9 marks these calls deprecated in favour of its graph API; they are still the ones it
// ships for batch norm in every build, and PyTorch still uses them.
#include <cudnn.h>
#include <tandem/core/cuda/check.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/handles.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <climits>

namespace tandem::cuda {
namespace {

int as_int(int64_t v) {
  TD_CHECK_VALUE(v <= INT_MAX, "batch_norm: size ", v, " is larger than cuDNN's limit ", INT_MAX);
  return int(v);
}

// x's descriptor, and the [1, C, 1, 1] one cuDNN derives from it for weight, bias and statistics.
struct Descs {
  cudnnTensorDescriptor_t x = nullptr, stats = nullptr;
  explicit Descs(const Tensor& t) {
    const int64_t n = t.size(0), c = t.size(1), s = n * c > 0 ? t.numel() / (n * c) : 1;
    const cudnnDataType_t type = t.dtype() == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    TD_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    TD_CUDNN_CHECK(cudnnCreateTensorDescriptor(&stats));
    TD_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, as_int(n), as_int(c), as_int(s), 1));
    TD_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(stats, x, CUDNN_BATCHNORM_SPATIAL));
  }
  ~Descs() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(stats);
  }
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
};

// cuDNN wants a weight and a bias (and somewhere to write their gradients) even without affine.
Tensor or_filled(const Tensor& t, const Tensor& like, double value) {
  return t.defined() ? t : full({like.size(1)}, value, like.options());
}

void check_dtype(const Tensor& x, const char* op) {
  TD_CHECK_DTYPE(x.dtype() == DType::f32 || x.dtype() == DType::f64, op,
                 ": the fused kernel takes float32 or float64, got ", x.dtype());
}

}  // namespace

void batch_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean,
                        Tensor& running_var, const BatchNormParams& p, Tensor& y, Tensor& mean,
                        Tensor& invstd) {
  check_dtype(x, "batch_norm");
  DeviceGuard guard(x.device());
  const Descs d(x);
  const Tensor scale = or_filled(w, x, 1.0), shift = or_filled(b, x, 0.0);
  const double one_d = 1, zero_d = 0;
  const float one_f = 1, zero_f = 0;
  const bool f64 = x.dtype() == DType::f64;
  TD_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cudnn_handle(x.device().index()), CUDNN_BATCHNORM_SPATIAL,
      f64 ? static_cast<const void*>(&one_d) : &one_f,
      f64 ? static_cast<const void*>(&zero_d) : &zero_f, d.x, x.data_ptr(), d.x, y.data_ptr(),
      d.stats, scale.data_ptr(), shift.data_ptr(), p.momentum,
      running_mean.defined() ? running_mean.data_ptr() : nullptr,
      running_var.defined() ? running_var.data_ptr() : nullptr, p.eps, mean.data_ptr(),
      invstd.data_ptr()));
}

void batch_norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& invstd,
                         const Tensor& dy, double eps, Tensor& dx, Tensor& dw, Tensor& db) {
  check_dtype(x, "batch_norm_backward");
  DeviceGuard guard(x.device());
  const Descs d(x);
  const Tensor scale = or_filled(w, x, 1.0);
  Tensor dscale = dw.defined() ? dw : empty({x.size(1)}, x.options());
  Tensor dshift = db.defined() ? db : empty({x.size(1)}, x.options());
  const double one_d = 1, zero_d = 0;
  const float one_f = 1, zero_f = 0;
  const bool f64 = x.dtype() == DType::f64;
  const void* one = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  TD_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      cudnn_handle(x.device().index()), CUDNN_BATCHNORM_SPATIAL, one, zero, one, zero, d.x,
      x.data_ptr(), d.x, dy.data_ptr(), d.x, dx.data_ptr(), d.stats, scale.data_ptr(),
      dscale.data_ptr(), dshift.data_ptr(), eps, mean.data_ptr(), invstd.data_ptr()));
}

}  // namespace tandem::cuda
