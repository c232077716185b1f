// parallel/tp/regions.cpp — each region op is a forward and its backward side by side, recorded
// as one node; the collectives inside run in the calling thread (forward) or in the thread that
// runs the node's backward, and are waited for at once: a region's edge is a synchronisation
// point of the tensor-parallel group, in forward and in backward alike.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/record.h>
#include <tandem/core/check.h>
#include <tandem/parallel/tp/regions.h>

namespace tandem::parallel::tp {
namespace {

void check_group(const Group& group, const char* op) {
  TD_CHECK_VALUE(group != nullptr, op, ": no tensor-parallel group (a null communicator)");
}

// The sum over the group of every rank's `x` (a new tensor: `x` is left as it is).
Tensor all_reduced(const Tensor& x, Communicator& group) {
  NoGradGuard no_grad;
  Tensor sum = x.contiguous().clone();
  group.all_reduce(sum)->wait();
  return sum;
}

// Every rank's `x` side by side along the last dimension, in rank order.
Tensor all_gathered_last(const Tensor& x, Communicator& group) {
  NoGradGuard no_grad;
  const Tensor mine = x.contiguous();
  std::vector<Tensor> parts;
  for (int r = 0; r < group.size(); ++r)
    parts.push_back(empty(mine.shape(), {.dtype = mine.dtype(), .device = mine.device()}));
  group.all_gather(parts, mine)->wait();
  return cat(parts, mine.dim() - 1);
}

// This rank's slice of the last dimension.
Tensor my_slice_last(const Tensor& x, const Communicator& group, const char* op) {
  NoGradGuard no_grad;
  const int64_t last = x.dim() - 1;
  const int64_t width =
      divide(x.shape()[size_t(last)], group.size(), str(op, ": the last dimension of ", x.shape()));
  return x.narrow(last, group.rank() * width, width).contiguous();
}

// Dims 0 and 1 swapped, contiguous: the sequence first, so that the communicator's chunks along
// dim 0 are runs of positions.
Tensor sequence_first(const Tensor& x, const char* op) {
  TD_CHECK_SHAPE(x.dim() >= 2, op, ": activations must be [B, T, ...], not ", x.shape());
  return x.transpose(0, 1).contiguous();
}

// Every rank's positions [B, T/t, ...] side by side along dim 1, in rank order: [B, T, ...].
Tensor all_gathered_sequence(const Tensor& x, Communicator& group, const char* op) {
  return start_sequence_gather(x, group, op).finish();
}

// The sum over the group of [B, T, ...], this rank's positions of it: [B, T/t, ...].
Tensor reduce_scattered_sequence(const Tensor& x, Communicator& group, const char* op) {
  return start_sequence_reduce_scatter(x, group, op).finish();
}

}  // namespace

SequenceGather start_sequence_gather(const Tensor& x, Communicator& group, const char* op) {
  NoGradGuard no_grad;
  const Tensor mine = sequence_first(x, op);
  Shape s = mine.shape();
  s[0] *= group.size();
  Tensor all = empty(s, {.dtype = mine.dtype(), .device = mine.device()});
  std::vector<Tensor> parts;
  for (int r = 0; r < group.size(); ++r)
    parts.push_back(all.narrow(0, r * mine.size(0), mine.size(0)));
  return {all, group.all_gather(parts, mine)};
}

Tensor SequenceGather::finish() {
  work->wait();
  NoGradGuard no_grad;
  return all.transpose(0, 1).contiguous();
}

SequenceReduceScatter start_sequence_reduce_scatter(const Tensor& x, Communicator& group,
                                                    const char* op) {
  NoGradGuard no_grad;
  const Tensor all = sequence_first(x, op);
  Shape s = all.shape();
  s[0] = divide(s[0], group.size(), tandem::str(op, ": the sequence length of ", x.shape()));
  Tensor mine = empty(s, {.dtype = all.dtype(), .device = all.device()});
  return {mine, group.reduce_scatter(mine, all)};
}

Tensor SequenceReduceScatter::finish() {
  work->wait();
  NoGradGuard no_grad;
  return mine.transpose(0, 1).contiguous();
}

Tensor rank_slice(const Tensor& whole, int64_t dim, int64_t blocks, int rank, int parts) {
  NoGradGuard no_grad;
  const int64_t block = whole.size(dim) / blocks, part = block / parts;
  std::vector<Tensor> pieces;
  for (int64_t b = 0; b < blocks; ++b)
    pieces.push_back(whole.detach().narrow(dim, b * block + rank * part, part));
  return cat(pieces, dim).contiguous();
}

Tensor sliced_parameter(const Tensor& whole, int64_t dim, int64_t start, int64_t length) {
  NoGradGuard no_grad;
  Tensor p = whole.detach().narrow(dim, start, length).contiguous().clone();
  p.requires_grad_();
  return p;
}

int64_t divide(int64_t size, int64_t parts, const std::string& what) {
  TD_CHECK_VALUE(parts > 0 && size % parts == 0, what, " (", size,
                 ") does not divide by the tensor-parallel size ", parts, "; pad it by ",
                 parts > 0 ? (parts - size % parts) % parts : 0, " to ",
                 parts > 0 ? (size + parts - 1) / parts * parts : size);
  return size / parts;
}

Tensor copy_to_tensor_parallel_region(const Tensor& x, const Group& group) {
  check_group(group, "copy_to_tensor_parallel_region");
  Tensor y;
  {
    NoGradGuard no_grad;
    y = x.detach();  // the same storage, a node of its own
  }
  return record("tp_copy_to_region", y, {x}, {},
                [group](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
                  return {all_reduced(dy, *group)};
                });
}

Tensor reduce_from_tensor_parallel_region(const Tensor& x, const Group& group) {
  check_group(group, "reduce_from_tensor_parallel_region");
  return record("tp_reduce_from_region", all_reduced(x, *group), {x}, {},
                [](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads { return {dy}; });
}

Tensor scatter_to_tensor_parallel_region(const Tensor& x, const Group& group) {
  check_group(group, "scatter_to_tensor_parallel_region");
  return record("tp_scatter_to_region",
                my_slice_last(x, *group, "scatter_to_tensor_parallel_region"), {x}, {},
                [group](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
                  return {all_gathered_last(dy, *group)};
                });
}

Tensor gather_from_tensor_parallel_region(const Tensor& x, const Group& group) {
  check_group(group, "gather_from_tensor_parallel_region");
  return record("tp_gather_from_region", all_gathered_last(x, *group), {x}, {},
                [group](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
                  return {my_slice_last(dy, *group, "gather_from_tensor_parallel_region")};
                });
}

Tensor gather_from_sequence_parallel_region(const Tensor& x, const Group& group) {
  constexpr const char* kOp = "gather_from_sequence_parallel_region";
  check_group(group, kOp);
  return record("sp_gather_from_region", all_gathered_sequence(x, *group, kOp), {x}, {},
                [group](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
                  return {reduce_scattered_sequence(dy, *group, kOp)};
                });
}

Tensor reduce_scatter_to_sequence_parallel_region(const Tensor& x, const Group& group) {
  constexpr const char* kOp = "reduce_scatter_to_sequence_parallel_region";
  check_group(group, kOp);
  return record("sp_reduce_scatter_to_region", reduce_scattered_sequence(x, *group, kOp), {x}, {},
                [group](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
                  return {all_gathered_sequence(dy, *group, kOp)};
                });
}

Tensor scatter_to_sequence_parallel_region(const Tensor& x, const Group& group) {
  constexpr const char* kOp = "scatter_to_sequence_parallel_region";
  check_group(group, kOp);
  Tensor mine;
  {
    NoGradGuard no_grad;
    TD_CHECK_SHAPE(x.dim() >= 2, kOp, ": activations must be [B, T, ...], not ", x.shape());
    const int64_t n =
        divide(x.size(1), group->size(), tandem::str(kOp, ": the sequence length of ", x.shape()));
    mine = x.detach().narrow(1, group->rank() * n, n).contiguous();
  }
  return record("sp_scatter_to_region", mine, {x}, {},
                [group](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
                  return {all_gathered_sequence(dy, *group, kOp)};
                });
}

}  // namespace tandem::parallel::tp
