// parallel/tp/column_linear.cpp — f and a column-parallel product as one op, so that backward
// can overlap the all-reduce of the input's gradient with the weight's gradient (Megatron-LM's
// LinearWithGradAccumulationAndAsyncCommunication): dX = dY·W is computed first and its
// all-reduce started; dW = dYᵀ·X and db are computed while it is on the wire; then it is waited
// for. Composed as f followed by linear, the engine would compute dW before f's node could send
// anything. Whether the two really run at once is the communicator's: Gloo, and shared memory
// above its inline size, run collectives on a thread of their own; the thread communicator runs
// a collective in the caller when its queue is idle.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/record.h>
#include <tandem/parallel/tp/layers.h>

namespace tandem::parallel::tp {

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
  auto backward = [group, in, out, x_shape = x.shape()](const Tensor& dy, const NeedsGrad& need,
                                                        const Saved& s) -> Grads {
    NoGradGuard no_grad;
    const Tensor dy2 = dy.contiguous().reshape({-1, out});
    Grads g(3);
    WorkPtr reduce;
    if (need[0]) {  // dX = dY·W, summed over the group (every rank read all of X): started now
      g[0] = matmul(dy2, s[1]).reshape(x_shape).contiguous();
      reduce = group->all_reduce(g[0]);
    }
    if (need[1]) g[1] = matmul(dy2.transpose(0, 1), s[0].contiguous().reshape({-1, in}));
    if (need[2]) g[2] = sum(dy2, {0});
    if (reduce) reduce->wait();
    return g;
  };
  if (b.defined())
    return record("tp_column_parallel_linear", y, {x, w, b}, {{"input", x}, {"weight", w}},
                  backward);
  return record("tp_column_parallel_linear", y, {x, w}, {{"input", x}, {"weight", w}},
                [backward](const Tensor& dy, const NeedsGrad& need, const Saved& s) -> Grads {
                  Grads g = backward(dy, {need[0], need[1], false}, s);
                  g.pop_back();
                  return g;
                });
}

}  // namespace tandem::parallel::tp
