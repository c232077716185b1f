// parallel/tp/vocab_parallel.cpp — the vocabulary-parallel embedding and loss. Both keep to
// this rank's V/t columns: the embedding masks the ids it does not hold and lets the group's sum
// fill them in; the loss sums three numbers per position over the group instead of gathering
// logits (for GPT-2's 50,257 tokens, B·T·V floats would dwarf everything else communicated).
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/record.h>
#include <tandem/core/check.h>
#include <tandem/parallel/tp/vocab_parallel.h>
#include <algorithm>
#include <limits>

namespace tandem::parallel::tp {
namespace {

// Names the first id outside [0, vocab) (read on the host only once one is known to be there).
void check_ids(const Tensor& ids, int64_t vocab) {
  TD_CHECK_DTYPE(ids.dtype() == kInt64, "VocabParallelEmbedding: ids must be int64, not ",
                 ids.dtype());
  if (ids.numel() == 0 || ids.device().is_meta()) return;  // meta ids have no values to check
  NoGradGuard no_grad;
  const int64_t lo = int64_t(amin(ids).item()), hi = int64_t(amax(ids).item());
  if (lo >= 0 && hi < vocab) return;
  const std::vector<int64_t> all = ids.to(Device::cpu()).contiguous().to_vector<int64_t>();
  for (size_t i = 0; i < all.size(); ++i)
    TD_CHECK_INDEX(all[i] >= 0 && all[i] < vocab, "VocabParallelEmbedding: id ", all[i],
                   " at position ", i, " (flattened) of ids ", ids.shape(),
                   " is outside the vocabulary of ", vocab);
}

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(const nn::Embedding& whole, Group g,
                                               PlacementTable* placements)
    : num_embeddings(whole.num_embeddings),
      embedding_dim(whole.embedding_dim),
      group(std::move(g)) {
  TD_CHECK_VALUE(group != nullptr, "VocabParallelEmbedding: no tensor-parallel group");
  TD_CHECK_VALUE(whole.padding_idx < 0, "VocabParallelEmbedding: padding_idx is not supported");
  const int64_t rows =
      divide(num_embeddings, group->size(), "VocabParallelEmbedding: num_embeddings");
  vocab_start = group->rank() * rows;
  weight = sliced_parameter(whole.weight, 0, vocab_start, rows);
  PlacementTable own;  // recorded even without a table, as the linear layers'
  (placements ? *placements : own).cut(weight, whole.weight.shape(), kDimension, group, Shard{0});
}

VocabParallelHead::VocabParallelHead(Tensor w, Group g, int64_t vocab_start, int64_t vocab_size,
                                     bool sp)
    : weight(std::move(w)), group(std::move(g)), sequence_parallel(sp) {
  const int64_t rows = weight.size(0);
  tokens = std::clamp(vocab_size - vocab_start, int64_t{0}, rows);
  TD_CHECK_VALUE(tokens > 0, "VocabParallelHead: rank ", group->rank(), " of ", group->size(),
                 " would hold no token of the ", vocab_size, "-token vocabulary (its rows ",
                 vocab_start, "..", vocab_start + rows - 1,
                 " are all padding); use fewer tensor-parallel ranks or less padding");
}

Tensor VocabParallelHead::forward(const Tensor& x) const {
  // Every rank reads all of x, so x's gradient is the sum of every rank's part: f, or, with
  // sequence parallelism, the all-gather whose backward reduce-scatters.
  const Tensor whole = sequence_parallel ? gather_from_sequence_parallel_region(x, group)
                                         : copy_to_tensor_parallel_region(x, group);
  if (tokens == weight.size(0)) return linear(whole, weight, Tensor());
  // The padding's columns: −∞, not computed from its rows (which so get no gradient); exp gives
  // them 0 in the loss's sums. One device's head leaves them out (nn::LMHead); here every rank's
  // part keeps its width, as the vocabulary-parallel loss reads them.
  const Tensor logits = linear(whole, weight.narrow(0, 0, tokens), Tensor());
  Shape pad = logits.shape();
  pad.back() = weight.size(0) - tokens;
  return cat({logits, full(pad, -std::numeric_limits<double>::infinity(), logits.options())}, -1);
}

std::string VocabParallelHead::extra_repr() const {
  return tandem::str("rows=", weight.size(0), " of the table, tokens=", tokens,
                     sequence_parallel ? ", sequence_parallel=True" : "");
}

Tensor VocabParallelEmbedding::partial(const Tensor& ids) const {
  check_ids(ids, num_embeddings);
  const int64_t rows = weight.size(0);
  Tensor local, held;
  {
    NoGradGuard no_grad;
    const Tensor shifted = ids - double(vocab_start);
    const Tensor in_range =
        ge(shifted, 0.0).to(weight.dtype()) * lt(shifted, double(rows)).to(weight.dtype());
    held = in_range.unsqueeze(-1);                                   // [..., 1]: 1 where held
    local = where(eq(in_range, 1.0), shifted, zeros_like(shifted));  // row 0 stands in elsewhere
  }
  // The rows this rank does not hold are zeroed (and get no gradient).
  return embedding(weight, local) * held;
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) const {
  return reduce_from_tensor_parallel_region(partial(ids), group);  // the group fills in the rest
}

std::string VocabParallelEmbedding::extra_repr() const {
  return tandem::str(num_embeddings, ", ", embedding_dim, " (ids ", vocab_start, "..",
                     vocab_start + weight.size(0) - 1, " on rank ", group->rank(), " of ",
                     group->size(), ")");
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    int64_t vocab_start, const Group& group, int64_t ignore_index) {
  TD_CHECK_VALUE(group != nullptr, "vocab_parallel_cross_entropy: no tensor-parallel group");
  Shape lead = logits.shape();
  TD_CHECK_SHAPE(logits.dim() >= 1,
                 "vocab_parallel_cross_entropy: logits must have a vocabulary "
                 "dimension, not ",
                 logits.shape());
  lead.pop_back();
  TD_CHECK_SHAPE(targets.shape() == lead, "vocab_parallel_cross_entropy: targets ", targets.shape(),
                 " must be logits ", logits.shape(), " without the last dimension");
  TD_CHECK_DTYPE(targets.dtype() == kInt64,
                 "vocab_parallel_cross_entropy: targets must be int64, "
                 "not ",
                 targets.dtype());
  const int64_t V = logits.shape().back();
  // 16-bit logits are read in float32, as autocast runs cross_entropy.
  const DType math = logits.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor loss, probs, column, mine, weights;
  {
    NoGradGuard no_grad;
    const Tensor l = logits.detach().reshape({-1, V}).to(math);  // [N, V/t]
    const Tensor t = targets.reshape({-1});                      // [N]
    const int64_t N = l.size(0);
    Tensor row_max = amax(l, {1}).contiguous();  // the whole row's maximum, for a stable exp
    group->all_reduce(row_max, ReduceOp::Max)->wait();
    const Tensor e = exp(l - row_max.reshape({N, 1}));
    Tensor sum_exp = sum(e, {1}).contiguous();
    group->all_reduce(sum_exp, ReduceOp::Sum)->wait();
    // The target's logit, from the one rank whose columns hold it.
    const Tensor shifted = t - double(vocab_start);
    mine = ge(shifted, 0.0).to(math) * lt(shifted, double(V)).to(math);  // [N]: 1 where held
    column = where(eq(mine, 1.0), shifted, zeros_like(shifted));
    Tensor target_logit = (gather(l, 1, column.reshape({N, 1})).reshape({N}) * mine).contiguous();
    group->all_reduce(target_logit, ReduceOp::Sum)->wait();
    // Mean over the positions that count (PyTorch's ignore_index).
    const Tensor valid = ne(t, double(ignore_index)).to(math);
    weights = valid / sum(valid);  // [N]
    loss = sum((log(sum_exp) + row_max - target_logit) * weights);
    probs = e / sum_exp.reshape({N, 1});
  }
  const Shape shape = logits.shape();
  const DType dtype = logits.dtype();
  return record("vocab_parallel_cross_entropy", loss, {logits},
                {{"probs", probs}, {"column", column}, {"mine", mine}, {"weights", weights}},
                [shape, dtype, V](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
                  // d loss / d logit = (softmax − one-hot) · weight of the row: this rank's
                  // columns of the whole gradient, with no communication. The one-hot is made
                  // here, not kept from forward: it would hold as much as the logits.
                  NoGradGuard no_grad;
                  const Tensor& p = s[0];
                  const Tensor columns = arange(double(V), {.dtype = kInt64, .device = p.device()});
                  const Tensor one_hot =
                      eq(columns.reshape({1, V}), s[1].reshape({-1, 1})).to(p.dtype()) *
                      s[2].reshape({-1, 1});
                  const Tensor w = s[3].reshape({-1, 1}) * dy;
                  return {((p - one_hot) * w).reshape(shape).to(dtype)};
                });
}

}  // namespace tandem::parallel::tp
