// core/kernels/cuda/registry.cpp — the CUDA kernel table. A plain .cpp: the launchers are host
// functions. Compiled with -Werror=missing-field-initializers, like the CPU registry, so a kernel
// left out is a build error.
#include <tandem/core/kernels/cuda/kernels_cuda.h>

namespace tandem {

extern const Kernels cuda_kernels;
const Kernels cuda_kernels = {
    .copy = cuda::copy,
    .fill = cuda::fill,
    .arange = cuda::arange,
    .uniform = cuda::uniform,
    .normal = cuda::normal,
    .unary = cuda::unary,
    .binary = cuda::binary,
    .compare = cuda::compare,
    .where = cuda::where,
    .relu_backward = cuda::relu_backward,
    .sigmoid_backward = cuda::sigmoid_backward,
    .tanh_backward = cuda::tanh_backward,
    .gelu_backward = cuda::gelu_backward,
    .add_scaled = cuda::add_scaled,
    .addcmul = cuda::addcmul,
    .addcdiv = cuda::addcdiv,
    .reduce_rows = cuda::reduce_rows,
    .reduce_cols = cuda::reduce_cols,
    .gemm = cuda::gemm,
    .softmax_forward = cuda::softmax_forward,
    .softmax_backward = cuda::softmax_backward,
    .log_softmax_forward = cuda::log_softmax_forward,
    .log_softmax_backward = cuda::log_softmax_backward,
    .conv2d_forward = cuda::conv2d_forward,
    .conv2d_backward = cuda::conv2d_backward,
    .max_pool2d_forward = cuda::max_pool2d_forward,
    .max_pool2d_backward = cuda::max_pool2d_backward,
    .avg_pool2d_forward = cuda::avg_pool2d_forward,
    .avg_pool2d_backward = cuda::avg_pool2d_backward,
    .cross_entropy_forward = cuda::cross_entropy_forward,
    .cross_entropy_backward = cuda::cross_entropy_backward,
    .nll_loss_forward = cuda::nll_loss_forward,
    .nll_loss_backward = cuda::nll_loss_backward,
    .sgd_step = cuda::sgd_step,
    .adam_step = cuda::adam_step,
};

}  // namespace tandem
