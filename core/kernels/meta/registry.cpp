// core/kernels/meta/registry.cpp — the meta device's kernel table: every kernel does nothing.
// An op on meta tensors still checks its operands, works out its outputs' shapes and dtypes and
// allocates them (which meta counts and does not perform: core/allocator.cpp), so what a forward
// and backward would hold is known without computing or storing a value. Compiled with
// -Werror=missing-field-initializers: a kernel added to kernels.h but not here fails the build.
#include <tandem/core/kernels/kernels.h>

namespace tandem {
namespace {

template <typename F>
struct Nothing;
template <typename... A>
struct Nothing<void (*)(A...)> {
  static void run(A...) {}
};
// The kernel of type F that does nothing.
template <typename F>
constexpr F nothing = &Nothing<F>::run;

}  // namespace

extern const Kernels meta_kernels;
const Kernels meta_kernels = {
    .copy = nothing<decltype(Kernels::copy)>,
    .fill = nothing<decltype(Kernels::fill)>,
    .arange = nothing<decltype(Kernels::arange)>,
    .uniform = nothing<decltype(Kernels::uniform)>,
    .normal = nothing<decltype(Kernels::normal)>,
    .unary = nothing<decltype(Kernels::unary)>,
    .binary = nothing<decltype(Kernels::binary)>,
    .compare = nothing<decltype(Kernels::compare)>,
    .where = nothing<decltype(Kernels::where)>,
    .relu_backward = nothing<decltype(Kernels::relu_backward)>,
    .sigmoid_backward = nothing<decltype(Kernels::sigmoid_backward)>,
    .tanh_backward = nothing<decltype(Kernels::tanh_backward)>,
    .gelu_backward = nothing<decltype(Kernels::gelu_backward)>,
    .gelu_tanh_backward = nothing<decltype(Kernels::gelu_tanh_backward)>,
    .add_scaled = nothing<decltype(Kernels::add_scaled)>,
    .addcmul = nothing<decltype(Kernels::addcmul)>,
    .addcdiv = nothing<decltype(Kernels::addcdiv)>,
    .reduce_rows = nothing<decltype(Kernels::reduce_rows)>,
    .reduce_cols = nothing<decltype(Kernels::reduce_cols)>,
    .square_sums = nothing<decltype(Kernels::square_sums)>,
    .gemm = nothing<decltype(Kernels::gemm)>,
    .softmax_forward = nothing<decltype(Kernels::softmax_forward)>,
    .softmax_backward = nothing<decltype(Kernels::softmax_backward)>,
    .log_softmax_forward = nothing<decltype(Kernels::log_softmax_forward)>,
    .log_softmax_backward = nothing<decltype(Kernels::log_softmax_backward)>,
    .conv2d_forward = nothing<decltype(Kernels::conv2d_forward)>,
    .conv2d_backward = nothing<decltype(Kernels::conv2d_backward)>,
    .max_pool2d_forward = nothing<decltype(Kernels::max_pool2d_forward)>,
    .relu_max_pool2d_forward = nothing<decltype(Kernels::relu_max_pool2d_forward)>,
    .max_pool2d_backward = nothing<decltype(Kernels::max_pool2d_backward)>,
    .avg_pool2d_forward = nothing<decltype(Kernels::avg_pool2d_forward)>,
    .avg_pool2d_backward = nothing<decltype(Kernels::avg_pool2d_backward)>,
    .cross_entropy_forward = nothing<decltype(Kernels::cross_entropy_forward)>,
    .cross_entropy_backward = nothing<decltype(Kernels::cross_entropy_backward)>,
    .nll_loss_forward = nothing<decltype(Kernels::nll_loss_forward)>,
    .nll_loss_backward = nothing<decltype(Kernels::nll_loss_backward)>,
    .batch_norm_forward = nothing<decltype(Kernels::batch_norm_forward)>,
    .batch_norm_backward = nothing<decltype(Kernels::batch_norm_backward)>,
    .layer_norm_forward = nothing<decltype(Kernels::layer_norm_forward)>,
    .layer_norm_backward = nothing<decltype(Kernels::layer_norm_backward)>,
    .embedding_forward = nothing<decltype(Kernels::embedding_forward)>,
    .embedding_backward = nothing<decltype(Kernels::embedding_backward)>,
    .attention_forward = nothing<decltype(Kernels::attention_forward)>,
    .attention_backward = nothing<decltype(Kernels::attention_backward)>,
    .gather = nothing<decltype(Kernels::gather)>,
    .scatter_add = nothing<decltype(Kernels::scatter_add)>,
    .topk = nothing<decltype(Kernels::topk)>,
    .multinomial = nothing<decltype(Kernels::multinomial)>,
    .sgd_step = nothing<decltype(Kernels::sgd_step)>,
    .adam_step = nothing<decltype(Kernels::adam_step)>,
    .adam_step_many = nothing<decltype(Kernels::adam_step_many)>,
    .adam_step_many_unless = nothing<decltype(Kernels::adam_step_many_unless)>,
    .unscale_grad = nothing<decltype(Kernels::unscale_grad)>,
    .amp_update_scale = nothing<decltype(Kernels::amp_update_scale)>,
};

}  // namespace tandem
