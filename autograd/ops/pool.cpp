// autograd/ops/pool.cpp — max and average pooling (NCHW). Max pooling keeps the argmax of each
// window, so its backward routes dy to exactly the element that won; relu_max_pool2d folds a relu
// in front of it into the same pass.
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/autograd/record.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {
namespace {

Shape pooled_shape(const char* op, const Tensor& x, const Pool2dParams& p) {
  check_floating(op, "input", x);
  check_dim(op, "input", x, 4, "[N, C, H, W]");
  TD_CHECK_VALUE(p.kernel_h >= 1 && p.kernel_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1, op,
                 ": kernel size and stride must be >= 1");
  TD_CHECK_VALUE(
      p.pad_h >= 0 && 2 * p.pad_h <= p.kernel_h && p.pad_w >= 0 && 2 * p.pad_w <= p.kernel_w, op,
      ": padding must be at most half the kernel size");
  // The span left after the first window; checked before dividing, as C++ division truncates
  // toward zero and would turn a negative span into one output row.
  const int64_t span_h = x.size(2) + 2 * p.pad_h - p.kernel_h;
  const int64_t span_w = x.size(3) + 2 * p.pad_w - p.kernel_w;
  TD_CHECK_SHAPE(span_h >= 0 && span_w >= 0, op, ": input ", x.shape(), " is smaller than the ",
                 p.kernel_h, "x", p.kernel_w, " window");
  return {x.size(0), x.size(1), span_h / p.stride_h + 1, span_w / p.stride_w + 1};
}

// The max pooling behind max_pool2d and relu_max_pool2d; relu clamps the maximum in the same pass.
Tensor max_pool(const char* op, const Tensor& x_in, const Pool2dParams& p, bool relu) {
  const Shape shape = pooled_shape(op, x_in, p);
  const Tensor x = detail::contiguous(x_in);
  Tensor y = empty(shape, x.options());
  Tensor indices = empty(shape, {.dtype = DType::i64, .device = x.device()});
  const Kernels& k = kernels(x.device());
  if (y.numel() > 0) (relu ? k.relu_max_pool2d_forward : k.max_pool2d_forward)(x, y, indices, p);
  return record(
      op, y, {x_in}, {{"indices", indices}},
      [p, in_shape = x.shape()](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
        Tensor dx = empty(in_shape, dy.options());
        if (dx.numel() > 0) kernels(dy.device()).max_pool2d_backward(dy, s[0], dx, p);
        return {dx};
      });
}

}  // namespace

// y = max over each window          dx[argmax] += dy
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  return max_pool("max_pool2d", x, p, false);
}

// y = max over each window of relu(x) = relu(max over the window), since relu keeps order.
// dx[argmax] += dy where y > 0: relu's gradient is [x > 0], and the argmax is the x that made y.
// One pass over x forward and one scatter backward, instead of relu's two extra passes over the
// whole activation (which pooling then shrinks 4×).
Tensor relu_max_pool2d(const Tensor& x, const Pool2dParams& p) {
  return max_pool("relu_max_pool2d", x, p, true);
}

// y = mean over each window         dx[window] += dy / window size
Tensor avg_pool2d(const Tensor& x_in, const Pool2dParams& p) {
  const Shape shape = pooled_shape("avg_pool2d", x_in, p);
  const Tensor x = detail::contiguous(x_in);
  Tensor y = empty(shape, x.options());
  if (y.numel() > 0) kernels(x.device()).avg_pool2d_forward(x, y, p);
  return record(
      "avg_pool2d", y, {x_in}, {},
      [p, in_shape = x.shape()](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
        Tensor dx = empty(in_shape, dy.options());
        if (dx.numel() > 0) kernels(dy.device()).avg_pool2d_backward(dy, dx, p);
        return {dx};
      });
}

}  // namespace tandem
