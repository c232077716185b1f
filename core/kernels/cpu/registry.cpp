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
};

}  // namespace tandem
