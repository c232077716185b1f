// autograd/ops/norm.cpp — layer norm: one fused pass forward that saves the mean and 1/std of
// each row (llm.c's layout), and a backward from them. Batch norm in training mode the same way,
// per channel.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/record.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {

// x̂ = (x − μ)·rstd, rstd = 1/√(σ² + ε), over the trailing dims   y = x̂·w + b
// g = dy·w:   dx = rstd·(g − mean(g) − x̂·mean(g·x̂))   dw = Σ dy·x̂   db = Σ dy   (over the rows)
Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& w_in,
                  const Tensor& b_in, double eps) {
  if (auto c = autocast::float32({x_in, w_in, b_in}))
    return layer_norm((*c)[0], normalized_shape, (*c)[1], (*c)[2], eps);
  const char* op = "layer_norm";
  check_same_device(op, {{"input", x_in}, {"weight", w_in}, {"bias", b_in}});
  check_same_dtype(op, {{"input", x_in}, {"weight", w_in}, {"bias", b_in}});
  TD_CHECK_DTYPE(is_floating(x_in.dtype()), op, ": input must be floating, but it is ",
                 describe(x_in));
  const size_t nd = normalized_shape.size();
  bool fits = nd >= 1 && nd <= size_t(x_in.dim());
  for (size_t i = 0; fits && i < nd; ++i)
    fits = x_in.shape()[x_in.shape().size() - nd + i] == normalized_shape[i];
  TD_CHECK_SHAPE(fits, op, ": input ", x_in.shape(), " does not end in normalized_shape ",
                 normalized_shape);
  for (const Tensor* t : {&w_in, &b_in})
    TD_CHECK_SHAPE(!t->defined() || t->shape() == normalized_shape, op, ": ",
                   t == &w_in ? "weight " : "bias ", t->shape(), " is not normalized_shape ",
                   normalized_shape);
  TD_CHECK_VALUE(eps > 0, op, ": eps must be positive, but it is ", eps);
  int64_t k = 1;
  for (int64_t d : normalized_shape) k *= d;
  const int64_t m = k ? x_in.numel() / k : 0;
  const Tensor x = detail::contiguous(x_in);
  const Tensor w = w_in.defined() ? detail::contiguous(w_in).reshape({k}) : Tensor();
  const Tensor b = b_in.defined() ? detail::contiguous(b_in).reshape({k}) : Tensor();
  // Statistics in the accumulation dtype: float32 for a 16-bit input.
  const TensorOptions stats{.dtype = accumulate_dtype(x.dtype()), .device = x.device()};
  Tensor y = empty(x.shape(), x.options()), mean = empty({m}, stats), rstd = empty({m}, stats);
  if (y.numel() > 0)
    kernels(x.device()).layer_norm_forward(x.reshape({m, k}), w, b, eps, y, mean, rstd);

  return record(op, y, {x_in, w_in, b_in},
                {{"input", x}, {"weight", w}, {"mean", mean}, {"rstd", rstd}},
                [m, k, w_shape = normalized_shape](const Tensor& dy, const NeedsGrad& need,
                                                   const Saved& s) -> Grads {
                  const Tensor &x = s[0], &w = s[1];
                  Tensor dx = empty(x.shape(), dy.options());
                  Tensor dw = need[1] ? empty({k}, dy.options()) : Tensor();
                  Tensor db = need[2] ? empty({k}, dy.options()) : Tensor();
                  if (dx.numel() > 0) {
                    kernels(dy.device())
                        .layer_norm_backward(x.reshape({m, k}), w, s[2], s[3], dy.reshape({m, k}),
                                             dx, dw, db);
                  } else {  // no rows: the sums are zero
                    if (dw.defined()) dw = zeros({k}, dy.options());
                    if (db.defined()) db = zeros({k}, dy.options());
                  }
                  return {dx, dw.defined() ? dw.reshape(w_shape) : Tensor(),
                          db.defined() ? db.reshape(w_shape) : Tensor()};
                });
}

// x̂ = (x − μ)·invstd per channel, over N and the dims after C   y = x̂·w + b
// dx = w·invstd/M·(M·dy − Σdy − x̂·Σdy·x̂)   dw = Σ dy·x̂   db = Σ dy   (M values per channel)
Tensor batch_norm(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, Tensor running_mean,
                  Tensor running_var, double momentum, double eps) {
  if (auto c = autocast::float32({x_in, w_in, b_in}))
    return batch_norm((*c)[0], (*c)[1], (*c)[2], running_mean, running_var, momentum, eps);
  const char* op = "batch_norm";
  check_same_device(op, {{"input", x_in},
                         {"weight", w_in},
                         {"bias", b_in},
                         {"running_mean", running_mean},
                         {"running_var", running_var}});
  check_same_dtype(op, {{"input", x_in},
                        {"weight", w_in},
                        {"bias", b_in},
                        {"running_mean", running_mean},
                        {"running_var", running_var}});
  TD_CHECK_DTYPE(is_floating(x_in.dtype()), op, ": input must be floating, but it is ",
                 describe(x_in));
  TD_CHECK_SHAPE(x_in.dim() >= 2 && x_in.numel() > 0, op,
                 ": expected a non-empty input [N, C, ...], but got shape ", x_in.shape());
  const int64_t c = x_in.size(1), m = x_in.numel() / c;
  for (const Tensor* t : {&w_in, &b_in, static_cast<const Tensor*>(&running_mean),
                          static_cast<const Tensor*>(&running_var)})
    TD_CHECK_SHAPE(!t->defined() || t->shape() == Shape{c}, op, ": a per-channel tensor has shape ",
                   t->shape(), "; expected [", c, "] for input ", x_in.shape());
  TD_CHECK_VALUE(m > 1 || !running_mean.defined(), op,
                 ": expected more than 1 value per channel to update the running variance, got "
                 "input ",
                 x_in.shape());
  TD_CHECK_VALUE(eps > 0, op, ": eps must be positive, but it is ", eps);
  const Tensor x = detail::contiguous(x_in);
  const Tensor w = w_in.defined() ? detail::contiguous(w_in) : Tensor();
  const Tensor b = b_in.defined() ? detail::contiguous(b_in) : Tensor();
  // Statistics in the accumulation dtype: float32 for a 16-bit input.
  const TensorOptions stats{.dtype = accumulate_dtype(x.dtype()), .device = x.device()};
  Tensor y = empty(x.shape(), x.options()), mean = empty({c}, stats), invstd = empty({c}, stats);
  kernels(x.device())
      .batch_norm_forward(x, w, b, running_mean, running_var, {momentum, eps}, y, mean, invstd);
  if (running_mean.defined()) detail::bump_version(running_mean);
  if (running_var.defined()) detail::bump_version(running_var);
  return record(
      op, y, {x_in, w_in, b_in}, {{"input", x}, {"weight", w}, {"mean", mean}, {"invstd", invstd}},
      [c, eps](const Tensor& dy, const NeedsGrad& need, const Saved& s) -> Grads {
        const Tensor& x = s[0];
        Tensor dx = empty(x.shape(), dy.options());
        Tensor dw = need[1] ? empty({c}, dy.options()) : Tensor();
        Tensor db = need[2] ? empty({c}, dy.options()) : Tensor();
        kernels(dy.device()).batch_norm_backward(x, s[1], s[2], s[3], dy, eps, dx, dw, db);
        return {dx, dw, db};
      });
}

}  // namespace tandem
