// parallel/cp/plan.cpp — a walk over the model putting the context-parallel attention and
// positions into each CausalSelfAttention and GPTEmbedding it holds.
#include <tandem/core/check.h>
#include <tandem/nn/gpt.h>
#include <tandem/parallel/cp/plan.h>
#include <tandem/parallel/cp/positional_random.h>
#include <tandem/parallel/cp/ulysses_attention.h>

namespace tandem::parallel::cp {

Algorithm parse_algorithm(const std::string& name) {
  if (name == "ring") return Algorithm::Ring;
  if (name == "ulysses") return Algorithm::Ulysses;
  TD_CHECK_VALUE(false, "context parallel: no algorithm \"", name, "\" (ring or ulysses)");
  return Algorithm::Ring;
}

const char* to_string(Algorithm algorithm) {
  return algorithm == Algorithm::Ring ? "ring" : "ulysses";
}

namespace {

class Planter : public nn::Visitor {
 public:
  Planter(std::shared_ptr<Communicator> group, const ContextParallelOptions& o)
      : group_(std::move(group)), o_(o) {}
  void operator()(std::string_view, Tensor&) override {}
  void buffer(std::string_view, Tensor&) override {}
  void operator()(std::string_view, nn::Module& child) override {
    if (auto* a = dynamic_cast<nn::CausalSelfAttention*>(&child)) attention(*a);
    if (auto* e = dynamic_cast<nn::GPTEmbedding*>(&child)) embedding(*e);
    if (auto* d = dynamic_cast<nn::Dropout*>(&child)) dropout(*d);
    child.visit(*this);
  }
  int attentions = 0;

 private:
  // qkv [B, t, 3·H·D] (this rank's positions) -> [B, H, t, D] over the whole sequence.
  void attention(nn::CausalSelfAttention& a) {
    ++attentions;
    a.attend = [g = group_, algorithm = o_.algorithm, split = o_.split, d = a.n_embd / a.n_head](
                   const Tensor& qkv, int64_t heads, const AttentionOptions& options) {
      const int64_t b = qkv.size(0), t = qkv.size(1);
      // [B, t, 3, H, D] -> q, k, v as [B, H, t, D]
      const Tensor parts = qkv.reshape({b, t, 3, heads, d}).permute({2, 0, 3, 1, 4});
      const ContextAttentionOptions c{.causal = options.causal,
                                      .split = split,
                                      .scale = options.scale,
                                      .dropout_p = options.dropout_p};
      return algorithm == Algorithm::Ring
                 ? ring_attention(parts.select(0, 0), parts.select(0, 1), parts.select(0, 2), *g, c)
                 : ulysses_attention(parts.select(0, 0), parts.select(0, 1), parts.select(0, 2), *g,
                                     c);
    };
  }
  void embedding(nn::GPTEmbedding& e) {
    e.positions = [g = group_, split = o_.split, block = e.block_size](int64_t t, Device device) {
      const int64_t whole = t * g->size();
      TD_CHECK_SHAPE(whole <= block, "GPT under context parallelism: ", g->size(), " ranks of ", t,
                     " positions make a sequence of ", whole, ", longer than the block size ",
                     block);
      const std::vector<int64_t> mine = positions_of(g->rank(), g->size(), whole, split);
      return from_vector(mine, {t}, device);
    };
  }

  // Its masks one device's at this rank's positions (positional_random.h).
  void dropout(nn::Dropout& d) {
    d.uniforms = [g = group_, split = o_.split](const Shape& shape, const TensorOptions& options) {
      return positional_uniforms(shape, options, g->rank(), g->size(), split);
    };
  }

  std::shared_ptr<Communicator> group_;
  const ContextParallelOptions& o_;
};

}  // namespace

nn::Sequential context_parallel(const nn::Sequential& model,
                                const std::shared_ptr<Communicator>& group,
                                ContextParallelOptions options) {
  TD_CHECK_VALUE(group != nullptr, "context_parallel: no group");
  nn::Sequential original = model;  // its modules, the same tensors
  nn::Sequential copy = nn::clone(model);
  Planter planter(group, options);
  copy.visit(planter);
  TD_CHECK_VALUE(planter.attentions > 0, "context_parallel: the model has no ",
                 "CausalSelfAttention whose heads could attend across the ranks");
  // What earlier wrappers recorded follows the copies. The plan records no dimension of its own:
  // its tensors are whole on every rank, and the data-parallel wrapper over dp × cp records the
  // one their gradients are reduced over ("dp_cp").
  if (options.placements) options.placements->follow(original.parameters(), copy.parameters());
  return copy;
}

Tensor shard_batch(const Tensor& batch, const Communicator& group, SequenceSplit split) {
  TD_CHECK_SHAPE(batch.dim() == 2, "context parallel: a batch must be [B, T], not ", batch.shape());
  return shard_sequence(batch, 1, group.rank(), group.size(), split);
}

}  // namespace tandem::parallel::cp
