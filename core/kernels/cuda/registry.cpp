// core/kernels/cuda/registry.cpp — the CUDA kernel table. A plain .cpp: the launchers are host
// functions. Compiled with -Werror=missing-field-initializers, like the CPU registry, so a kernel
// left out is a build error. Kernels written for float32/float64 serve bfloat16 and float16
// through widened<> (widen.h); unary and binary ops, the activations' backwards, the reductions
// and cross-entropy compute them in float inside their own kernels (in_float.cuh); copies, fills,
// comparisons, GEMM and convolution (cuBLAS's and cuDNN's 16-bit tensor-core paths) handle every
// dtype themselves.
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/widen.h>

namespace tandem {
namespace {

// 16-bit parameters one at a time through the widened kernel; the rest batched.
void adam_step_many(std::span<const AdamSlot> slots, const AdamParams& p) {
  std::vector<AdamSlot> batched;
  batched.reserve(slots.size());
  for (const AdamSlot& s : slots) {
    if (element_size(s.param->dtype()) == 2)
      widened<cuda::adam_step>(*s.param, *s.grad, *s.exp_avg, *s.exp_avg_sq, p);
    else
      batched.push_back(s);
  }
  cuda::adam_step_many(batched, p);
}

// One 16-bit parameter through the batched kernel, for widened<> (its step and flag are float32
// and pass through).
void adam_one_unless(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                     Tensor& step, const AdamParams& p, const Tensor& found_inf) {
  const AdamSlot slot{&param, &grad, &exp_avg, &exp_avg_sq, &step};
  cuda::adam_step_many_unless({&slot, 1}, p, found_inf);
}

void adam_step_many_unless(std::span<const AdamSlot> slots, const AdamParams& p,
                           const Tensor& found_inf) {
  std::vector<AdamSlot> batched;
  batched.reserve(slots.size());
  for (const AdamSlot& s : slots) {
    if (element_size(s.param->dtype()) == 2)
      widened<adam_one_unless>(*s.param, *s.grad, *s.exp_avg, *s.exp_avg_sq, *s.step, p, found_inf);
    else
      batched.push_back(s);
  }
  cuda::adam_step_many_unless(batched, p, found_inf);
}

// The tensor-core kernels where the op asked for them (AttentionParams::flash), else the CUDA-core
// ones, which serve the 16-bit types through float32 copies.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                       const AttentionParams& p, Tensor& out, Tensor& lse) {
  if (p.flash)
    cuda::flash_attention_forward(q, k, v, mask, p, out, lse);
  else
    widened<cuda::attention_forward>(q, k, v, mask, p, out, lse);
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        const Tensor& out, const Tensor& lse, const Tensor& dout,
                        const AttentionParams& p, Tensor& dq, Tensor& dk, Tensor& dv) {
  if (p.flash)
    cuda::flash_attention_backward(q, k, v, mask, out, lse, dout, p, dq, dk, dv);
  else
    widened<cuda::attention_backward>(q, k, v, mask, out, lse, dout, p, dq, dk, dv);
}

}  // namespace

extern const Kernels cuda_kernels;
const Kernels cuda_kernels = {
    .copy = cuda::copy,
    .fill = cuda::fill,
    .arange = widened<cuda::arange>,
    .uniform = widened<cuda::uniform>,
    .normal = widened<cuda::normal>,
    .unary = cuda::unary,
    .binary = cuda::binary,
    .compare = cuda::compare,
    .where = cuda::where,
    .relu_backward = cuda::relu_backward,
    .sigmoid_backward = cuda::sigmoid_backward,
    .tanh_backward = cuda::tanh_backward,
    .gelu_backward = cuda::gelu_backward,
    .gelu_tanh_backward = cuda::gelu_tanh_backward,
    .add_scaled = widened<cuda::add_scaled>,
    .addcmul = widened<cuda::addcmul>,
    .addcdiv = widened<cuda::addcdiv>,
    .reduce_rows = cuda::reduce_rows,  // 16-bit read in place, reduced in float
    .reduce_cols = cuda::reduce_cols,
    .square_sums = cuda::square_sums,
    .gemm = cuda::gemm,
    .softmax_forward = widened<cuda::softmax_forward>,
    .softmax_backward = widened<cuda::softmax_backward>,
    .log_softmax_forward = widened<cuda::log_softmax_forward>,
    .log_softmax_backward = widened<cuda::log_softmax_backward>,
    .conv2d_forward = cuda::conv2d_forward,
    .conv2d_backward = cuda::conv2d_backward,
    .max_pool2d_forward = widened<cuda::max_pool2d_forward>,
    .relu_max_pool2d_forward = widened<cuda::relu_max_pool2d_forward>,
    .max_pool2d_backward = widened<cuda::max_pool2d_backward>,
    .avg_pool2d_forward = widened<cuda::avg_pool2d_forward>,
    .avg_pool2d_backward = widened<cuda::avg_pool2d_backward>,
    .cross_entropy_forward = cuda::cross_entropy_forward,  // 16-bit logits read in place
    .cross_entropy_backward = cuda::cross_entropy_backward,
    .nll_loss_forward = widened<cuda::nll_loss_forward>,
    .nll_loss_backward = widened<cuda::nll_loss_backward>,
    .batch_norm_forward = widened<cuda::batch_norm_forward>,
    .batch_norm_backward = widened<cuda::batch_norm_backward>,
    .layer_norm_forward = widened<cuda::layer_norm_forward>,
    .layer_norm_backward = widened<cuda::layer_norm_backward>,
    .embedding_forward = cuda::embedding_forward,
    .embedding_backward = widened<cuda::embedding_backward>,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .gather = widened<cuda::gather>,
    .scatter_add = widened<cuda::scatter_add>,
    .topk = widened<cuda::topk>,
    .multinomial = widened<cuda::multinomial>,
    .sgd_step = widened<cuda::sgd_step>,
    .adam_step = widened<cuda::adam_step>,
    .adam_step_many = adam_step_many,
    .adam_step_many_unless = adam_step_many_unless,
    .unscale_grad = widened<cuda::unscale_grad>,
    .amp_update_scale = cuda::amp_update_scale,
};

}  // namespace tandem
