// core/kernels/cuda/kernels_cuda.h — the CUDA kernels, in the order of kernels.h, one group per
// .cu file. registry.cpp puts them into the table.
#pragma once

#include <tandem/core/kernels/kernels.h>

namespace tandem::cuda {

// copy.cu
void copy(const Tensor& src, Tensor& dst);
void fill(Tensor& out, double value);
// random.cu
void arange(Tensor& out, double start, double step);
void uniform(Tensor& out, double low, double high, GeneratorState state);
void normal(Tensor& out, double mean, double std, GeneratorState state);
// elementwise.cu
void unary(UnaryOp op, const Tensor& x, Tensor& y);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
void compare(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out);
// activation.cu
void relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);
void sigmoid_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);
void gelu_tanh_backward(const Tensor& x, const Tensor& dy, Tensor& dx);
// inplace.cu
void add_scaled(Tensor& self, const Tensor& x, double alpha);
void addcmul(Tensor& self, const Tensor& a, const Tensor& b, double value);
void addcdiv(Tensor& self, const Tensor& a, const Tensor& b, double value);
// reduce.cu
void reduce_rows(ReduceOp op, const Tensor& x, Tensor& out);
void reduce_cols(ReduceOp op, const Tensor& x, Tensor& out);
// square_sums.cu
void square_sums(std::span<const Tensor> xs, Tensor& out);
// matmul.cu (cuBLAS)
void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b);
// softmax.cu
void softmax_forward(const Tensor& x, Tensor& y);
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void log_softmax_forward(const Tensor& x, Tensor& y);
void log_softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
// conv.cu (cuDNN)
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                    const Conv2dParams& p);
void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db, const Conv2dParams& p);
// pool.cu
void max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices, const Pool2dParams& p);
void relu_max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices, const Pool2dParams& p);
void max_pool2d_backward(const Tensor& dy, const Tensor& indices, Tensor& dx,
                         const Pool2dParams& p);
void avg_pool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p);
void avg_pool2d_backward(const Tensor& dy, Tensor& dx, const Pool2dParams& p);
// loss.cu
void cross_entropy_forward(const Tensor& logits, const Tensor& target, Tensor& loss, Tensor& lse,
                           const ClassLossParams& p);
void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits, const ClassLossParams& p);
void nll_loss_forward(const Tensor& log_probs, const Tensor& target, Tensor& loss,
                      const ClassLossParams& p);
void nll_loss_backward(const Tensor& target, const Tensor& dloss, Tensor& dlog_probs,
                       const ClassLossParams& p);
// norm.cu
void batch_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean,
                        Tensor& running_var, const BatchNormParams& p, Tensor& y, Tensor& mean,
                        Tensor& invstd);
void batch_norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& invstd,
                         const Tensor& dy, double eps, Tensor& dx, Tensor& dw, Tensor& db);
void layer_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, Tensor& y,
                        Tensor& mean, Tensor& rstd);
void layer_norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db);
// embedding.cu
void embedding_forward(const Tensor& weight, const Tensor& ids, Tensor& out);
void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dweight, int64_t padding_idx);
// attention.cu
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                       const AttentionParams& p, Tensor& out, Tensor& lse);
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        const Tensor& out, const Tensor& lse, const Tensor& dout,
                        const AttentionParams& p, Tensor& dq, Tensor& dk, Tensor& dv);
// flash_attention.cu: the same on the tensor cores, where flash_attention_unsupported() allows
void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             const AttentionParams& p, Tensor& out, Tensor& lse);
void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                              const Tensor& out, const Tensor& lse, const Tensor& dout,
                              const AttentionParams& p, Tensor& dq, Tensor& dk, Tensor& dv);
// index.cu
void gather(const Tensor& x, const Tensor& index, Tensor& out);
void scatter_add(const Tensor& index, const Tensor& src, Tensor& out);
void topk(const Tensor& x, int64_t k, bool largest, Tensor& values, Tensor& indices);
void multinomial(const Tensor& probs, int64_t samples, bool replacement, GeneratorState rng,
                 Tensor& out);
// optim.cu
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdParams& p);
void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
               const AdamParams& p);
void adam_step_many(std::span<const AdamSlot> slots, const AdamParams& p);  // float32/float64
void adam_step_many_unless(std::span<const AdamSlot> slots, const AdamParams& p,
                           const Tensor& found_inf);  // float32/float64
void unscale_grad(Tensor& grad, const Tensor& scale, Tensor& found_inf);
void amp_update_scale(Tensor& scale, Tensor& growth_tracker, Tensor& skipped,
                      const Tensor& found_inf, const AmpScaleParams& p);

}  // namespace tandem::cuda
