// parallel/tp/column_linear.cpp — a column-parallel product and the communication before it as
// one op, so that backward can overlap that communication with the weight's gradient
// (Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication). Composed as two ops, the
// engine would compute dW before the communication op's node could send anything.
//   f, then x·wᵀ + b:  dX = dY·W is computed first and its all-reduce started; dW = dYᵀ·X and db
//                      are computed while it is on the wire; then it is waited for.
//   sequence parallel: forward all-gathers x's positions; only this rank's positions are saved
//                      (1/t of the input), and backward gathers them again while it computes dX,
//                      then reduce-scatters dX while it computes dW.
// Whether the two really run at once is the communicator's: Gloo, and shared memory above its
// inline size, run collectives on a thread of their own; the thread communicator runs a
// collective in the caller when its queue is idle.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/record.h>
#include <tandem/parallel/tp/layers.h>
#include <optional>

namespace tandem::parallel::tp {
namespace {

using Backward = BackwardFn;

// Records y = op(x, w, b) with x and w saved; without a bias, the backward's third gradient is
// neither asked for nor returned.
Tensor record_column(const char* name, const Tensor& y, const Tensor& x, const Tensor& w,
                     const Tensor& b, Backward backward) {
  if (b.defined())
    return record(name, y, {x, w, b}, {{"input", x}, {"weight", w}}, std::move(backward));
  return record(name, y, {x, w}, {{"input", x}, {"weight", w}},
                [backward](const Tensor& dy, const NeedsGrad& need, const Saved& s) -> Grads {
                  Grads g = backward(dy, {need[0], need[1], false}, s);
                  g.pop_back();
                  return g;
                });
}

}  // namespace

Tensor column_parallel_linear(const Tensor& x, const Tensor& w, const Tensor& b,
                              const Group& group) {
  if (auto c = autocast::lower_precision({x, w, b}))  // as linear(): cast first, then one dtype
    return column_parallel_linear((*c)[0], (*c)[1], (*c)[2], group);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = linear(x, w, b);  // f is the identity in forward
  }
  const int64_t in = w.size(1), out = w.size(0);
  auto backward = [group, in, out, x_shape = x.shape(), dtype = w.dtype()](
                      const Tensor& dy, const NeedsGrad& need, const Saved& s) -> Grads {
    NoGradGuard no_grad;
    // In the inputs' dtype (autocast's bfloat16, say), whatever the gradient arrived in.
    const Tensor dy2 = dy.contiguous().reshape({-1, out}).to(dtype);
    Grads g(3);
    WorkPtr reduce;
    if (need[0]) {  // dX = dY·W, summed over the group (every rank read all of X): started now
      g[0] = matmul(dy2, s[1]).reshape(x_shape).contiguous();
      reduce = group->all_reduce(g[0]);
    }
    if (need[1]) g[1] = matmul(dy2.transpose(0, 1), s[0].contiguous().reshape({-1, in}));
    if (need[2]) g[2] = sum(dy2, {0}).to(dtype);
    if (reduce) reduce->wait();
    return g;
  };
  return record_column("tp_column_parallel_linear", y, x, w, b, backward);
}

Tensor sequence_parallel_column_linear(const Tensor& x, const Tensor& w, const Tensor& b,
                                       const Group& group) {
  static constexpr const char* kOp = "ColumnParallelLinear (sequence parallel)";
  if (auto c = autocast::lower_precision({x, w, b}))
    return sequence_parallel_column_linear((*c)[0], (*c)[1], (*c)[2], group);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = linear(start_sequence_gather(x, *group, kOp).finish(), w, b);
  }
  const int64_t in = w.size(1), out = w.size(0);
  auto backward = [group, in, out, dtype = w.dtype()](const Tensor& dy, const NeedsGrad& need,
                                                      const Saved& s) -> Grads {
    NoGradGuard no_grad;
    std::optional<SequenceGather> x_all;  // this rank's positions of X, gathered again
    if (need[1]) x_all = start_sequence_gather(s[0], *group, kOp);
    const Tensor dy2 = dy.contiguous().reshape({-1, out}).to(dtype);  // the inputs' dtype
    Grads g(3);
    std::optional<SequenceReduceScatter> dx;  // dX = dY·W, each rank's positions of the sum
    if (need[0]) {
      Shape whole = dy.shape();
      whole.back() = in;
      dx = start_sequence_reduce_scatter(matmul(dy2, s[1]).reshape(whole), *group, kOp);
    }
    if (need[1]) g[1] = matmul(dy2.transpose(0, 1), x_all->finish().reshape({-1, in}));
    if (need[2]) g[2] = sum(dy2, {0}).to(dtype);
    if (dx) g[0] = dx->finish();
    return g;
  };
  return record_column("tp_sequence_parallel_column_linear", y, x, w, b, backward);
}

}  // namespace tandem::parallel::tp
