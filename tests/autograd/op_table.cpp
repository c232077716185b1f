// tests/autograd/op_table.cpp — the rows. Inputs are float64 and drawn away from the points where
// an op is not differentiable (relu and abs at 0, log and sqrt at x <= 0, ties of max).
#include "autograd/op_table.h"

#include "support/expect.h"

namespace tandem::testing {

using V = const std::vector<Tensor>&;

std::vector<OpCase> core_rows();

std::vector<OpCase> layer_rows();  // op_table_layers.cpp

void expect_close(const OpResult& got, const OpResult& want, double atol, double rtol,
                  const std::string& row) {
  EXPECT_TRUE(all_close(got.out, want.out, atol, rtol)) << row << " forward";
  ASSERT_EQ(got.grads.size(), want.grads.size()) << row;
  for (size_t i = 0; i < want.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i].defined(), want.grads[i].defined()) << row << " input " << i;
    if (want.grads[i].defined()) {
      EXPECT_TRUE(all_close(got.grads[i], want.grads[i], atol, rtol))
          << row << " gradient of input " << i;
    }
  }
}

const std::vector<OpCase>& op_table() {
  static const std::vector<OpCase> rows = [] {
    std::vector<OpCase> all = core_rows();
    for (OpCase& row : layer_rows()) all.push_back(std::move(row));
    return all;
  }();
  return rows;
}

std::vector<OpCase> core_rows() {
  return {
      // elementwise arithmetic, same shapes and broadcast
      {"add", {{3, 4}, {3, 4}}, [](V x) { return x[0] + x[1]; }},
      {"add_broadcast_row", {{3, 4}, {4}}, [](V x) { return x[0] + x[1]; }},
      {"add_broadcast_outer", {{3, 1}, {1, 4}}, [](V x) { return x[0] + x[1]; }},
      {"sub_broadcast", {{2, 3}, {2, 1}}, [](V x) { return x[0] - x[1]; }},
      {"mul_broadcast", {{2, 3, 4}, {3, 1}}, [](V x) { return x[0] * x[1]; }},
      {"mul_self", {{5}}, [](V x) { return x[0] * x[0]; }},
      {"div", {{3, 4}, {4}}, [](V x) { return x[0] / x[1]; }, Inputs::Positive},
      {"scalar_ops", {{4}}, [](V x) { return 2.0 - (x[0] * 3.0 + 1.0) / 2.0; }},
      {"scalar_div_by_tensor", {{4}}, [](V x) { return 1.0 / x[0]; }, Inputs::Positive},
      {"pow_scalar", {{6}}, [](V x) { return x[0].pow(2.5); }, Inputs::Positive},
      {"pow_tensor", {{2, 3}, {3}}, [](V x) { return x[0].pow(x[1]); }, Inputs::Positive},
      {"maximum", {{3, 4}, {4}}, [](V x) { return maximum(x[0], x[1]); }},
      {"minimum", {{3, 4}, {3, 4}}, [](V x) { return minimum(x[0], x[1]); }},
      {"neg", {{3}}, [](V x) { return -x[0]; }},
      {"exp", {{2, 3}}, [](V x) { return x[0].exp(); }},
      {"log", {{2, 3}}, [](V x) { return x[0].log(); }, Inputs::Positive},
      {"sqrt", {{2, 3}}, [](V x) { return x[0].sqrt(); }, Inputs::Positive},
      {"abs", {{6}}, [](V x) { return abs(x[0]); }, Inputs::AwayFromZero},
      // activations
      {"relu", {{4, 5}}, [](V x) { return x[0].relu(); }, Inputs::AwayFromZero},
      {"sigmoid", {{4, 5}}, [](V x) { return x[0].sigmoid(); }},
      {"tanh", {{4, 5}}, [](V x) { return x[0].tanh(); }},
      {"gelu", {{4, 5}}, [](V x) { return x[0].gelu(); }},
      {"gelu_tanh", {{4, 5}}, [](V x) { return gelu(x[0], GeluApproximate::Tanh); }},
      {"relu_of_transposed", {{3, 4}}, [](V x) { return x[0].t().relu(); }, Inputs::AwayFromZero},
      // selection
      {"where",
       {{3, 4}, {4}},
       [](V x) { return where(x[0].gt(0.0), x[0], x[1]); },
       Inputs::AwayFromZero},
      // reductions
      {"sum_all", {{3, 4}}, [](V x) { return x[0].sum(); }},
      {"sum_dim_keepdim", {{3, 4}}, [](V x) { return x[0].sum({1}, true); }},
      {"sum_outer_dims",
       {{2, 3, 4}},
       [](V x) {
         return x[0].sum({0, 2});
       }},
      {"sum_leading_dim", {{5, 3}}, [](V x) { return x[0].sum({0}); }},
      {"mean_dim", {{3, 4}}, [](V x) { return x[0].mean({0}); }},
      {"mean_all", {{2, 3, 2}}, [](V x) { return x[0].mean(); }},
      {"max_dim", {{3, 5}}, [](V x) { return x[0].max(1); }},
      {"min_all", {{3, 5}}, [](V x) { return x[0].min(); }},
      {"max_keepdim_dim0", {{4, 3}}, [](V x) { return x[0].max(0, true); }},
      // matmul
      {"matmul_2d", {{3, 4}, {4, 5}}, [](V x) { return x[0].matmul(x[1]); }},
      {"matmul_of_offset_views",
       {{5, 4}, {4, 6}},
       [](V x) { return x[0].narrow(0, 2, 3).matmul(x[1].narrow(1, 1, 4)); }},
      {"batched_matmul_of_offset_view",
       {{3, 2, 4}, {4, 2}},
       [](V x) { return x[0].narrow(0, 1, 2).matmul(x[1]); }},
      {"softmax_of_offset_view", {{4, 5}}, [](V x) { return x[0].narrow(0, 1, 2).softmax(1); }},
      {"sum_of_offset_view", {{4, 5}}, [](V x) { return x[0].narrow(0, 1, 2).sum({1}); }},
      {"matmul_transposed_operand", {{5, 4}, {3, 4}}, [](V x) { return x[0].matmul(x[1].t()); }},
      {"matmul_vector", {{3, 4}, {4}}, [](V x) { return x[0].matmul(x[1]); }},
      {"matmul_dot", {{4}, {4}}, [](V x) { return x[0].matmul(x[1]); }},
      {"matmul_batched", {{2, 3, 4}, {2, 4, 2}}, [](V x) { return x[0].matmul(x[1]); }},
      {"matmul_batch_broadcast", {{2, 3, 4}, {4, 2}}, [](V x) { return x[0].matmul(x[1]); }},
      {"matmul_batch_broadcast_left", {{3, 4}, {2, 4, 2}}, [](V x) { return x[0].matmul(x[1]); }},
      {"matmul_batch_dims_broadcast",
       {{2, 1, 2, 3}, {3, 3, 2}},
       [](V x) { return x[0].matmul(x[1]); }},
      // softmax
      {"softmax_last", {{3, 5}}, [](V x) { return x[0].softmax(1); }},
      {"softmax_first", {{3, 5}}, [](V x) { return x[0].softmax(0); }},
      {"log_softmax", {{2, 3, 4}}, [](V x) { return x[0].log_softmax(-1); }},
      {"log_softmax_middle", {{2, 3, 4}}, [](V x) { return x[0].log_softmax(1); }},
      // views and copies
      {"reshape",
       {{2, 6}},
       [](V x) {
         return x[0].reshape({3, 4}) * 2.0;
       }},
      {"view_infer",
       {{2, 6}},
       [](V x) {
         return x[0].view({-1, 3});
       }},
      {"reshape_copy", {{3, 4}}, [](V x) { return x[0].t().reshape({12}); }},
      {"flatten", {{2, 3, 2}}, [](V x) { return x[0].flatten(1); }},
      {"transpose", {{2, 3, 4}}, [](V x) { return x[0].transpose(0, 2) * 1.5; }},
      {"permute",
       {{2, 3, 4}},
       [](V x) {
         return x[0].permute({1, 2, 0}).contiguous();
       }},
      {"narrow", {{4, 5}}, [](V x) { return x[0].narrow(1, 1, 3); }},
      {"cat_dim0",
       {{2, 3}, {1, 3}, {3, 3}},
       [](V x) {
         return cat({x[0], x[1], x[2]}, 0);
       }},
      {"cat_dim1_views",
       {{3, 2}, {4, 3}},
       [](V x) {
         return cat({x[0].t(), x[1].narrow(0, 1, 2)}, 1) * 1.5;
       }},
      {"stack_dim1",
       {{2, 3}, {2, 3}},
       [](V x) {
         return stack({x[0], x[1] * 2.0}, 1);
       }},
      {"chunk_uneven",
       {{7, 2}},
       [](V x) {
         const std::vector<Tensor> p = chunk(x[0], 3, 0);  // 3, 3, 1 rows
         return cat({p[2] * 3.0, p[0], p[1] * 2.0}, 0);
       }},
      {"split_sizes",
       {{2, 6}},
       [](V x) {
         const std::vector<Tensor> p = split(x[0], {1, 3, 2}, 1);
         return p[1].sum({1}) + p[2].sum({1}) * p[0].squeeze(1);
       }},
      {"select", {{4, 5}}, [](V x) { return x[0].select(0, 2); }},
      {"squeeze_unsqueeze", {{3, 1, 2}}, [](V x) { return x[0].squeeze(1).unsqueeze(0); }},
      {"expand",
       {{3, 1}},
       [](V x) {
         return x[0].expand({2, 3, 4});
       }},
      {"clone", {{3}}, [](V x) { return x[0].clone(); }},
      {"to_other_device",
       {{2, 3}},
       [](V x) { return (x[0].to(Device("cpu:2")) * 2.0).to(x[0].device()); }},
      // compositions: the same input reaching the output along several paths
      {"mlp_layer",
       {{4, 3}, {5, 3}, {5}},
       [](V x) { return (x[0].matmul(x[1].t()) + x[2]).tanh(); }},
      {"diamond", {{3}}, [](V x) { return x[0].exp() * x[0].sigmoid() + x[0]; }},
  };
}

std::vector<Tensor> make_inputs(const OpCase& row, Device device) {
  std::vector<Tensor> inputs;
  manual_seed(1234);
  for (const Shape& shape : row.shapes) {
    Tensor x = randn(shape, {.dtype = kFloat64});
    if (row.inputs == Inputs::Positive) x = rand(shape, {.dtype = kFloat64}) + 0.5;
    if (row.inputs == Inputs::AwayFromZero) x = where(x.ge(0.0), x + 0.2, x - 0.2);
    inputs.push_back(x.to(device).detach().requires_grad_());
  }
  return inputs;
}

}  // namespace tandem::testing
