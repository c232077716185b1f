// tests/autograd/op_table_layers.cpp — op-table rows for the layer ops: linear, convolution
// (stride, padding, dilation, groups), pooling, the losses, batch norm, dropout, layer norm and
// embedding.
#include "autograd/op_table.h"

namespace tandem::testing {

using V = const std::vector<Tensor>&;

namespace {
// Class labels on the logits' device (a row's helper tensors go where its inputs are: the same
// rows run on cpu:1 and cuda:0).
Tensor labels(std::vector<int64_t> v, const Tensor& logits) {
  return from_vector(v, {int64_t(v.size())}).to(logits.device());
}
// Token ids [2, 3] on the table's device, every row of a 5-row table but one, some twice.
Tensor token_ids(const Tensor& table) {
  return from_vector(std::vector<int64_t>{1, 4, 1, 0, 2, 4}, {2, 3}).to(table.device());
}
}  // namespace

std::vector<OpCase> layer_rows() {
  return {
      {"linear", {{4, 3}, {5, 3}, {5}}, [](V x) { return linear(x[0], x[1], x[2]); }},
      {"linear_3d_input_no_bias",
       {{2, 4, 3}, {5, 3}},
       [](V x) { return linear(x[0], x[1], Tensor()); }},
      {"linear_of_offset_view",
       {{6, 3}, {5, 3}, {5}},
       [](V x) { return linear(x[0].narrow(0, 2, 3), x[1], x[2]); }},
      {"conv2d_of_offset_view",
       {{3, 2, 4, 4}, {2, 2, 3, 3}},
       [](V x) { return conv2d(x[0].narrow(0, 1, 2), x[1], Tensor()); }},
      {"conv2d", {{2, 3, 5, 5}, {4, 3, 3, 3}, {4}}, [](V x) { return conv2d(x[0], x[1], x[2]); }},
      // One input channel (K = 9), as in a first layer on grey images.
      {"conv2d_one_channel",
       {{3, 1, 5, 12}, {4, 1, 3, 3}, {4}},
       [](V x) { return conv2d(x[0], x[1], x[2]); }},
      {"conv2d_stride_padding",
       {{1, 2, 6, 5}, {3, 2, 3, 2}, {3}},
       [](V x) {
         return conv2d(x[0], x[1], x[2], {.stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 2});
       }},
      // Padding wider than the kernel (whole kernel rows fall outside), column stride 3.
      {"conv2d_wide_padding_strided_columns",
       {{1, 2, 4, 7}, {2, 2, 2, 3}, {2}},
       [](V x) {
         return conv2d(x[0], x[1], x[2], {.stride_h = 1, .stride_w = 3, .pad_h = 3, .pad_w = 1});
       }},
      {"conv2d_dilation",
       {{1, 2, 7, 7}, {2, 2, 3, 3}},
       [](V x) { return conv2d(x[0], x[1], Tensor(), {.dilation_h = 2, .dilation_w = 2}); }},
      {"conv2d_groups",
       {{2, 4, 4, 4}, {6, 2, 2, 2}, {6}},
       [](V x) { return conv2d(x[0], x[1], x[2], {.groups = 2}); }},
      {"max_pool2d", {{2, 2, 4, 6}}, [](V x) { return max_pool2d(x[0], {}); }},
      {"max_pool2d_stride_padding",
       {{1, 2, 5, 5}},
       [](V x) {
         return max_pool2d(x[0], {3, 3, 2, 2, 1, 1});
       }},
      {"relu_max_pool2d",
       {{2, 2, 4, 6}},
       [](V x) { return relu_max_pool2d(x[0], {}); },
       Inputs::AwayFromZero},
      {"relu_max_pool2d_stride_padding",
       {{1, 2, 5, 5}},
       [](V x) {
         return relu_max_pool2d(x[0], {3, 3, 2, 2, 1, 1});
       },
       Inputs::AwayFromZero},
      {"avg_pool2d", {{2, 2, 4, 6}}, [](V x) { return avg_pool2d(x[0], {}); }},
      {"avg_pool2d_padding_excluded",
       {{1, 1, 5, 5}},
       [](V x) {
         return avg_pool2d(x[0], {3, 3, 2, 2, 1, 1, false});
       }},
      {"cross_entropy",
       {{4, 5}},
       [](V x) {
         return cross_entropy(x[0], labels({0, 3, 4, 1}, x[0]));
       }},
      {"cross_entropy_sum_smoothing",
       {{4, 5}},
       [](V x) {
         return cross_entropy(x[0], labels({2, 3, 0, 1}, x[0]),
                              {.reduction = Reduction::Sum, .label_smoothing = 0.1});
       }},
      {"cross_entropy_ignore_index_none",
       {{4, 3}},
       [](V x) {
         return cross_entropy(x[0], labels({2, -100, 0, 1}, x[0]), {.reduction = Reduction::None});
       }},
      {"nll_loss",
       {{4, 5}},
       [](V x) {
         return nll_loss(x[0].log_softmax(1), labels({0, 3, 4, 1}, x[0]));
       }},
      {"mse_loss", {{3, 4}, {3, 4}}, [](V x) { return mse_loss(x[0], x[1]); }},
      {"batch_norm_2d_train",
       {{3, 2, 2, 2}, {2}, {2}},
       [](V x) {
         nn::BatchNorm2d bn(2, {.tensor = {.dtype = x[0].dtype(), .device = x[0].device()}});
         bn.weight = x[1];
         bn.bias = x[2];
         return bn(x[0]);
       }},
      {"batch_norm_1d_eval",
       {{4, 3}},
       [](V x) {
         nn::BatchNorm1d bn(3, {.tensor = {.dtype = x[0].dtype(), .device = x[0].device()}});
         bn.eval();
         return bn(x[0]);
       }},
      {"dropout",
       {{4, 5}},
       [](V x) {
         manual_seed(3);  // the same mask for every evaluation
         return nn::dropout(x[0], 0.3, true);
       }},
      {"layer_norm", {{4, 6}, {6}, {6}}, [](V x) { return layer_norm(x[0], {6}, x[1], x[2]); }},
      {"layer_norm_3d_no_affine", {{2, 3, 5}}, [](V x) { return layer_norm(x[0], {5}); }},
      {"layer_norm_over_two_dims_no_bias",
       {{2, 3, 4}, {3, 4}},
       [](V x) {
         return layer_norm(x[0], {3, 4}, x[1], Tensor(), 1e-3);
       }},
      {"batch_norm_2d",
       {{4, 3, 2, 2}, {3}, {3}},
       [](V x) { return batch_norm(x[0], x[1], x[2], Tensor(), Tensor()); }},
      {"batch_norm_1d_no_affine",
       {{5, 4}},
       [](V x) { return batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor()); }},
      {"batch_norm_3d_running_stats",
       {{3, 2, 5}, {2}, {2}},
       [](V x) {
         // The running statistics change with every call; the output does not depend on them.
         Tensor mean = zeros({2}, {.dtype = x[0].dtype(), .device = x[0].device()});
         Tensor var = ones({2}, {.dtype = x[0].dtype(), .device = x[0].device()});
         return batch_norm(x[0], x[1], x[2], mean, var, 0.1, 1e-3);
       }},
      {"embedding", {{5, 3}}, [](V x) { return embedding(x[0], token_ids(x[0])); }},
      // A padding row the ids do not use: its gradient would be held at zero, which finite
      // differences cannot agree with (transformer_ops_test checks that row).
      {"embedding_padding_idx_unused",
       {{5, 3}},
       [](V x) { return embedding(x[0], token_ids(x[0]), 3); }},
      {"attention",
       {{2, 3, 4}, {2, 5, 4}, {2, 5, 3}},
       [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }},
      // Auto picks Math on CUDA (nn_ops.h): each backend by name too, so both run on every device.
      {"attention_causal_4d_fused",
       {{1, 2, 5, 3}, {1, 2, 5, 3}, {1, 2, 5, 2}},
       [](V x) {
         return scaled_dot_product_attention(x[0], x[1], x[2],
                                             {.causal = true, .backend = AttentionBackend::Fused});
       }},
      {"attention_causal_4d_math",
       {{1, 2, 5, 3}, {1, 2, 5, 3}, {1, 2, 5, 2}},
       [](V x) {
         return scaled_dot_product_attention(x[0], x[1], x[2],
                                             {.causal = true, .backend = AttentionBackend::Math});
       }},
      {"attention_bool_mask_scale",
       {{2, 3, 4}, {2, 4, 4}, {2, 4, 2}},
       [](V x) {
         const Tensor mask = from_vector(std::vector<bool>{true, false, true, true, true, true,
                                                           false, false, true, false, true, false},
                                         {3, 4})
                                 .to(x[0].device());
         return scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = mask, .scale = 0.7});
       }},
      {"gather_dim0",
       {{3, 4}},
       [](V x) {
         return gather(
             x[0], 0,
             from_vector(std::vector<int64_t>{2, 0, 1, 2, 0, 0, 2, 1}, {2, 4}).to(x[0].device()));
       }},
      {"topk_values", {{3, 5}}, [](V x) { return topk(x[0], 2).first; }},
      {"tril_above_diagonal", {{2, 4, 3}}, [](V x) { return tril(x[0], 1); }},
      {"gpt_blocks_and_tied_head",
       {{2, 3, 8}},
       [](V x) {
         manual_seed(6);
         nn::Sequential net = nn::gpt({.block_size = 4,
                                       .vocab_size = 5,
                                       .n_layer = 2,
                                       .n_head = 2,
                                       .n_embd = 8,
                                       .tensor = {.dtype = x[0].dtype()}});
         net.to(x[0].device());
         return net.slice(1, net.size())(x[0]);  // everything after the embedding
       }},
      {"sequential_cnn",
       {{2, 1, 6, 6}},
       [](V x) {
         manual_seed(5);
         nn::Sequential net(nn::Conv2d(1, 2, 3, {.padding = 1, .tensor = {.dtype = x[0].dtype()}}),
                            nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                            nn::Linear(18, 3, {.tensor = {.dtype = x[0].dtype()}}));
         net.to(x[0].device());  // drawn on the CPU, so every device gets the same weights
         return net(x[0]);
       },
       Inputs::Normal},
  };
}

}  // namespace tandem::testing
