// core/kernels/cpu/registry.cpp — the CPU kernel table. Compiled with
// -Werror=missing-field-initializers: a kernel added to kernels.h but not here fails the build.
#include <tandem/core/kernels/cpu/kernels_cpu.h>

namespace tandem {

extern const Kernels cpu_kernels;
const Kernels cpu_kernels = {
    .copy = cpu::copy,
    .fill = cpu::fill,
    .arange = cpu::arange,
    .uniform = cpu::uniform,
    .normal = cpu::normal,
    .unary = cpu::unary,
    .binary = cpu::binary,
    .compare = cpu::compare,
    .where = cpu::where,
    .relu_backward = cpu::relu_backward,
    .sigmoid_backward = cpu::sigmoid_backward,
    .tanh_backward = cpu::tanh_backward,
    .gelu_backward = cpu::gelu_backward,
    .add_scaled = cpu::add_scaled,
    .addcmul = cpu::addcmul,
    .addcdiv = cpu::addcdiv,
    .reduce_rows = cpu::reduce_rows,
    .reduce_cols = cpu::reduce_cols,
    .gemm = cpu::gemm,
    .softmax_forward = cpu::softmax_forward,
    .softmax_backward = cpu::softmax_backward,
    .log_softmax_forward = cpu::log_softmax_forward,
    .log_softmax_backward = cpu::log_softmax_backward,
    .conv2d_forward = cpu::conv2d_forward,
    .conv2d_backward = cpu::conv2d_backward,
    .max_pool2d_forward = cpu::max_pool2d_forward,
    .max_pool2d_backward = cpu::max_pool2d_backward,
    .avg_pool2d_forward = cpu::avg_pool2d_forward,
    .avg_pool2d_backward = cpu::avg_pool2d_backward,
    .cross_entropy_forward = cpu::cross_entropy_forward,
    .cross_entropy_backward = cpu::cross_entropy_backward,
    .nll_loss_forward = cpu::nll_loss_forward,
    .nll_loss_backward = cpu::nll_loss_backward,
    .sgd_step = cpu::sgd_step,
    .adam_step = cpu::adam_step,
};

}  // namespace tandem
