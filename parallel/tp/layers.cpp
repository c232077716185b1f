// parallel/tp/layers.cpp — the two tensor-parallel Linears: a slice of one device's layer, and
// the region ops around the product (regions.h).
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/parallel/tp/layers.h>

namespace tandem::parallel::tp {
namespace {

Tensor whole_copy(const Tensor& t) {
  if (!t.defined()) return Tensor();
  NoGradGuard no_grad;
  Tensor p = t.detach().clone();
  p.requires_grad_();
  return p;
}

const Group& checked(const Group& group, const char* layer) {
  TD_CHECK_VALUE(group != nullptr, layer, ": no tensor-parallel group (a null communicator)");
  return group;
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(int64_t in, int64_t out, Group g,
                                           nn::LinearOptions linear, ColumnParallelOptions o)
    : ColumnParallelLinear(nn::Linear(in, out, linear), std::move(g), o) {}

ColumnParallelLinear::ColumnParallelLinear(const nn::Linear& whole, Group g,
                                           ColumnParallelOptions o)
    : in_features(whole.in_features),
      out_features(whole.out_features),
      group(checked(g, "ColumnParallelLinear")),
      options(o) {
  TD_CHECK_VALUE(o.stride >= 1 && out_features % o.stride == 0,
                 "ColumnParallelLinear: out_features ", out_features,
                 " is not a whole number of blocks of stride ", o.stride);
  TD_CHECK_VALUE(!(o.gather_output && o.stride > 1),
                 "ColumnParallelLinear: gather_output with stride ", o.stride,
                 " would put rank-ordered blocks where the whole layout is expected");
  divide(out_features / o.stride, group->size(),
         o.stride == 1 ? tandem::str("ColumnParallelLinear: out_features")
                       : tandem::str("ColumnParallelLinear: each of the ", o.stride,
                                     " blocks of out_features"));
  // Rows [b·block + r·rows, +rows) of every block b, in block order.
  auto mine = [&](const Tensor& t) {
    Tensor p = rank_slice(t, 0, o.stride, group->rank(), group->size());
    p.requires_grad_();
    return p;
  };
  weight = mine(whole.weight);
  if (whole.bias.defined()) bias = mine(whole.bias);
  // Recorded even without a table: another table that meets these slices adopts the cut.
  PlacementTable own;
  PlacementTable& table = o.placements ? *o.placements : own;
  table.cut(weight, whole.weight.shape(), kDimension, group, Shard{0, o.stride});
  if (bias.defined()) table.cut(bias, whole.bias.shape(), kDimension, group, Shard{0, o.stride});
}

Tensor ColumnParallelLinear::forward(const Tensor& x) const {
  TD_CHECK_SHAPE(x.dim() >= 1 && x.shape().back() == in_features, "ColumnParallelLinear: input ",
                 x.shape(), " does not end in in_features ", in_features);
  // The communication before the product and the product are one op whose backward overlaps
  // the communication of x's gradient with the weight's (column_linear.cpp).
  const Tensor y = options.sequence_parallel
                       ? sequence_parallel_column_linear(x, weight, bias, group)
                       : column_parallel_linear(x, weight, bias, group);
  return options.gather_output ? gather_from_tensor_parallel_region(y, group) : y;
}

void ColumnParallelLinear::visit(nn::Visitor& v) {
  v("weight", weight);
  if (bias.defined()) v("bias", bias);
}

std::string ColumnParallelLinear::extra_repr() const {
  return tandem::str("in_features=", in_features, ", out_features=", out_features, " (",
                     weight.shape()[0], " on rank ", group->rank(), " of ", group->size(),
                     "), bias=", bias.defined() ? "True" : "False",
                     ", gather_output=", options.gather_output,
                     options.stride > 1 ? tandem::str(", stride=", options.stride) : std::string());
}

RowParallelLinear::RowParallelLinear(int64_t in, int64_t out, Group g, nn::LinearOptions linear,
                                     RowParallelOptions o)
    : RowParallelLinear(nn::Linear(in, out, linear), std::move(g), o) {}

RowParallelLinear::RowParallelLinear(const nn::Linear& whole, Group g, RowParallelOptions o)
    : in_features(whole.in_features),
      out_features(whole.out_features),
      group(checked(g, "RowParallelLinear")),
      options(o) {
  const int64_t cols = divide(in_features, group->size(), "RowParallelLinear: in_features");
  weight = sliced_parameter(whole.weight, 1, group->rank() * cols, cols);
  bias = whole_copy(whole.bias);
  PlacementTable own;  // recorded even without a table, as the column layer's
  PlacementTable& table = o.placements ? *o.placements : own;
  table.cut(weight, whole.weight.shape(), kDimension, group, Shard{1});
  // Added after the sum: with sequence parallelism each rank adds it to its positions only.
  if (bias.defined() && o.sequence_parallel)
    table.cut(bias, whole.bias.shape(), kDimension, group, Partial{});
}

Tensor RowParallelLinear::forward(const Tensor& x) const {
  const int64_t local = weight.shape()[1];
  const bool parallel_input = options.input_is_parallel;
  const int64_t want = parallel_input ? local : in_features;
  TD_CHECK_SHAPE(x.dim() >= 1 && x.shape().back() == want, "RowParallelLinear: input ", x.shape(),
                 " does not end in ", want,
                 parallel_input ? " (in_features / tensor-parallel size: this rank's slice)"
                                : " (in_features)");
  const Tensor mine = parallel_input ? x : scatter_to_tensor_parallel_region(x, group);
  // The bias is added once, after the sum: adding it on every rank would count it t times.
  const Tensor partial = linear(mine, weight, Tensor());
  const Tensor y = options.sequence_parallel
                       ? reduce_scatter_to_sequence_parallel_region(partial, group)
                       : reduce_from_tensor_parallel_region(partial, group);
  return bias.defined() ? y + bias : y;
}

void RowParallelLinear::visit(nn::Visitor& v) {
  v("weight", weight);
  if (bias.defined()) v("bias", bias);
}

std::string RowParallelLinear::extra_repr() const {
  return tandem::str("in_features=", in_features, " (", weight.shape()[1], " on rank ",
                     group->rank(), " of ", group->size(), "), out_features=", out_features,
                     ", bias=", bias.defined() ? "True" : "False",
                     ", input_is_parallel=", options.input_is_parallel);
}

}  // namespace tandem::parallel::tp
