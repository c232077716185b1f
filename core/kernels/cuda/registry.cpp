// core/kernels/cuda/registry.cpp — the CUDA kernel table. A plain .cpp: the launchers are host
// functions. Compiled with -Werror=missing-field-initializers, like the CPU registry. Kernels not
// written yet throw DeviceError naming themselves (not_available), never crash on a null pointer.
#include <tandem/core/kernels/cuda/kernels_cuda.h>

namespace tandem {

extern const Kernels cuda_kernels;
const Kernels cuda_kernels = {
    .copy = cuda::copy,
    .fill = cuda::fill,
    .arange = not_available<"arange">,  // the CUDA backend: issue #4
    .uniform = not_available<"uniform">,
    .normal = not_available<"normal">,
    .unary = not_available<"unary">,
    .binary = not_available<"binary">,
    .compare = not_available<"compare">,
    .where = not_available<"where">,
    .relu_backward = not_available<"relu_backward">,
    .sigmoid_backward = not_available<"sigmoid_backward">,
    .tanh_backward = not_available<"tanh_backward">,
    .gelu_backward = not_available<"gelu_backward">,
    .add_scaled = not_available<"add_scaled">,
    .addcmul = not_available<"addcmul">,
    .addcdiv = not_available<"addcdiv">,
    .reduce_rows = not_available<"reduce_rows">,
    .reduce_cols = not_available<"reduce_cols">,
    .gemm = not_available<"gemm">,
    .softmax_forward = not_available<"softmax_forward">,
    .softmax_backward = not_available<"softmax_backward">,
    .log_softmax_forward = not_available<"log_softmax_forward">,
    .log_softmax_backward = not_available<"log_softmax_backward">,
    .conv2d_forward = not_available<"conv2d_forward">,
    .conv2d_backward = not_available<"conv2d_backward">,
    .max_pool2d_forward = not_available<"max_pool2d_forward">,
    .max_pool2d_backward = not_available<"max_pool2d_backward">,
    .avg_pool2d_forward = not_available<"avg_pool2d_forward">,
    .avg_pool2d_backward = not_available<"avg_pool2d_backward">,
    .cross_entropy_forward = not_available<"cross_entropy_forward">,
    .cross_entropy_backward = not_available<"cross_entropy_backward">,
    .nll_loss_forward = not_available<"nll_loss_forward">,
    .nll_loss_backward = not_available<"nll_loss_backward">,
    .sgd_step = not_available<"sgd_step">,
    .adam_step = not_available<"adam_step">,
};

}  // namespace tandem
