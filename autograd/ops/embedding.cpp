// autograd/ops/embedding.cpp — a lookup table: rows of `weight` by id; backward adds each
// position's gradient into its id's row.
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/record.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {

// y[..., :] = weight[ids[...], :]          dweight[v] = Σ_{ids = v, v ≠ padding_idx} dy
Tensor embedding(const Tensor& weight, const Tensor& ids_in, int64_t padding_idx) {
  const char* op = "embedding";
  check_same_device(op, {{"weight", weight}, {"ids", ids_in}});
  check_dtype(op, "ids", ids_in, kInt64);
  TD_CHECK_DTYPE(is_floating(weight.dtype()), op, ": weight must be floating, but it is ",
                 describe(weight));
  TD_CHECK_SHAPE(weight.dim() == 2, op, ": weight must be [num_embeddings, embedding_dim], not ",
                 weight.shape());
  const int64_t rows = weight.size(0), d = weight.size(1);
  TD_CHECK_INDEX(padding_idx == -1 || (padding_idx >= 0 && padding_idx < rows), op,
                 ": padding_idx ", padding_idx, " is out of range for a table of ", rows, " rows");
  const Tensor ids = detail::contiguous(ids_in);
  Shape out_shape = ids.shape();
  out_shape.push_back(d);
  Tensor y = empty(out_shape, weight.options());
  kernels(weight.device())
      .embedding_forward(detail::contiguous(weight), ids.reshape({ids.numel()}), y);

  return record(
      op, y, {weight}, {{"ids", ids}},
      [rows, d, padding_idx](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
        Tensor dw = empty({rows, d}, dy.options());
        const Tensor flat = s[0].reshape({s[0].numel()});
        kernels(dy.device())
            .embedding_backward(flat, dy.reshape({flat.numel(), d}), dw, padding_idx);
        return {dw};
      });
}

}  // namespace tandem
