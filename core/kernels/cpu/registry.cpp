// core/kernels/cpu/registry.cpp — the CPU kernel table. Compiled with
// -Werror=missing-field-initializers: a kernel added to kernels.h but not here fails the build.
// Kernels written for float32/float64 serve bfloat16 and float16 through widened<> (widen.h);
// copies, fills, comparisons, GEMM, convolution and the elementwise kernels (runs.h) handle every
// dtype themselves.
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/widen.h>

namespace tandem {
namespace {

// The CPU's update is one pass per tensor already; nothing to gain from batching tensors.
void adam_step_many(std::span<const AdamSlot> slots, const AdamParams& p) {
  for (const AdamSlot& s : slots)
    widened<cpu::adam_step>(*s.param, *s.grad, *s.exp_avg, *s.exp_avg_sq, p);
}

// The flag is in memory the host reads: read it, and step as adam_step_many at each slot's step.
void adam_step_many_unless(std::span<const AdamSlot> slots, const AdamParams& p,
                           const Tensor& found_inf) {
  if (found_inf.defined() && *found_inf.data<float>() != 0) return;
  for (const AdamSlot& s : slots) {
    float& step = *s.step->data<float>();
    step += 1;
    AdamParams at = p;
    at.step = int64_t(step);
    widened<cpu::adam_step>(*s.param, *s.grad, *s.exp_avg, *s.exp_avg_sq, at);
  }
}

}  // namespace

extern const Kernels cpu_kernels;
const Kernels cpu_kernels = {
    .copy = cpu::copy,
    .fill = cpu::fill,
    .arange = widened<cpu::arange>,
    .uniform = widened<cpu::uniform>,
    .normal = widened<cpu::normal>,
    .unary = cpu::unary,
    .binary = cpu::binary,
    .compare = cpu::compare,
    .where = cpu::where,
    .relu_backward = cpu::relu_backward,
    .sigmoid_backward = cpu::sigmoid_backward,
    .tanh_backward = cpu::tanh_backward,
    .gelu_backward = cpu::gelu_backward,
    .gelu_tanh_backward = cpu::gelu_tanh_backward,
    .add_scaled = widened<cpu::add_scaled>,
    .addcmul = widened<cpu::addcmul>,
    .addcdiv = widened<cpu::addcdiv>,
    .reduce_rows = widened<cpu::reduce_rows>,
    .reduce_cols = cpu::reduce_cols,
    .square_sums = cpu::square_sums,
    .gemm = cpu::gemm,
    .softmax_forward = widened<cpu::softmax_forward>,
    .softmax_backward = widened<cpu::softmax_backward>,
    .log_softmax_forward = widened<cpu::log_softmax_forward>,
    .log_softmax_backward = widened<cpu::log_softmax_backward>,
    .conv2d_forward = cpu::conv2d_forward,
    .conv2d_backward = cpu::conv2d_backward,
    .max_pool2d_forward = widened<cpu::max_pool2d_forward>,
    .relu_max_pool2d_forward = widened<cpu::relu_max_pool2d_forward>,
    .max_pool2d_backward = widened<cpu::max_pool2d_backward>,
    .avg_pool2d_forward = widened<cpu::avg_pool2d_forward>,
    .avg_pool2d_backward = widened<cpu::avg_pool2d_backward>,
    .cross_entropy_forward = cpu::cross_entropy_forward,  // 16-bit logits read in place
    .cross_entropy_backward = cpu::cross_entropy_backward,
    .nll_loss_forward = widened<cpu::nll_loss_forward>,
    .nll_loss_backward = widened<cpu::nll_loss_backward>,
    .batch_norm_forward = widened<cpu::batch_norm_forward>,
    .batch_norm_backward = widened<cpu::batch_norm_backward>,
    .layer_norm_forward = widened<cpu::layer_norm_forward>,
    .layer_norm_backward = widened<cpu::layer_norm_backward>,
    .embedding_forward = cpu::embedding_forward,
    .embedding_backward = widened<cpu::embedding_backward>,
    .attention_forward = widened<cpu::attention_forward>,
    .attention_backward = widened<cpu::attention_backward>,
    .gather = widened<cpu::gather>,
    .scatter_add = widened<cpu::scatter_add>,
    .topk = widened<cpu::topk>,
    .multinomial = widened<cpu::multinomial>,
    .sgd_step = widened<cpu::sgd_step>,
    .adam_step = widened<cpu::adam_step>,
    .adam_step_many = adam_step_many,
    .adam_step_many_unless = adam_step_many_unless,
    .unscale_grad = widened<cpu::unscale_grad>,
    .amp_update_scale = cpu::amp_update_scale,
};

}  // namespace tandem
