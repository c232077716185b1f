// parallel/tp/gpt.cpp — the GPT's modules with Megatron's plan (gpt.h): each is made from the
// whole module and keeps its slices; forward is nn/transformer.cpp's with this rank's heads.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/generator.h>
#include <tandem/nn/activation_checkpoint.h>
#include <tandem/parallel/tp/gpt.h>
#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

namespace tandem::parallel::tp {
namespace {

// c_attn, once the heads are known to divide (checked first: a slice of rows that cut a head in
// two would be the error a user could not read).
const nn::Linear& c_attn_of(const nn::CausalSelfAttention& whole, const Plan& plan) {
  TD_CHECK_VALUE(plan.group != nullptr, "ParallelAttention: no tensor-parallel group");
  divide(whole.n_head, plan.group->size(), "ParallelAttention: n_head");
  return whole.c_attn;
}

// fn() with this rank's own stream standing in for `device`'s generator: the random numbers drawn
// inside differ from rank to rank. An activation checkpoint notes the stream as a generator of
// the block's own (not as the device's), and its recompute replays it.
template <typename F>
Tensor on_rank_stream(const std::shared_ptr<Generator>& stream, Device device, F&& fn) {
  TD_CHECK_VALUE(stream != nullptr,
                 "tensor parallelism: a dropout whose masks differ between ranks needs the "
                 "plan's rank_stream, and this Plan has none (tensor_parallel_gpt makes one)");
  // The stream itself, or its private copy while a checkpointed block recomputes (which then
  // draws the forward's masks again and leaves the stream where the forward left it).
  Generator& own = own_generator(*stream);
  ReplayGenerators scope({{device, own.get_state()}}, {}, /*noted=*/false);
  Tensor y = fn();
  own.set_state(ReplayGenerators::find(device)->get_state());
  return y;
}

// A dropout outside the regions: the same mask on every rank, unless every rank holds other
// positions (sequence parallelism), when each draws from its own stream.
Tensor region_dropout(const nn::Dropout& drop, const Plan& plan, const Tensor& x) {
  if (!plan.options.sequence_parallel || !drop.is_training() || drop.p <= 0) return drop(x);
  return on_rank_stream(plan.rank_stream, x.device(), [&] { return drop(x); });
}

// The block inside an nn::Checkpointed item (with the item's options), or null.
const nn::Block* checkpointed_block(nn::Module& m, nn::ActivationCheckpointOptions* options) {
  auto* c = dynamic_cast<nn::Checkpointed*>(&m);
  if (c) *options = c->options();
  return c ? dynamic_cast<const nn::Block*>(&c->module()) : nullptr;
}

}  // namespace

ParallelAttention::ParallelAttention(const nn::CausalSelfAttention& whole, const Plan& p)
    : n_head(whole.n_head),
      n_embd(whole.n_embd),
      dropout(whole.dropout),
      c_attn(c_attn_of(whole, p), p.group,
             {.stride = 3,
              .sequence_parallel = p.options.sequence_parallel,
              .placements = p.options.placements.get()}),
      c_proj(whole.c_proj, p.group,
             {.sequence_parallel = p.options.sequence_parallel,
              .placements = p.options.placements.get()}),
      resid_dropout(whole.resid_dropout.p),
      plan(p) {}

Tensor ParallelAttention::forward(const Tensor& x) const {
  TD_CHECK_SHAPE(x.dim() == 3 && x.size(2) == n_embd, "ParallelAttention: input must be [B, T, ",
                 n_embd, "], not ", x.shape());
  const Tensor qkv = c_attn(x);  // [B, T, 3·C/t]: q | k | v of this rank's heads, all positions
  const int64_t B = qkv.size(0), T = qkv.size(1), D = n_embd / n_head;
  const int64_t H = n_head / plan.group->size(), C = H * D;
  const double p = is_training() ? dropout : 0.0;
  auto attend = [&] {  // this rank's H heads, their gradient back as one tensor
    return scaled_dot_product_attention_packed(qkv, H, {.causal = true, .dropout_p = p});
  };
  // Different heads must get different masks, as on one device: this rank's stream.
  const Tensor y = p > 0 ? on_rank_stream(plan.rank_stream, x.device(), attend) : attend();
  return region_dropout(resid_dropout, plan, c_proj(y.transpose(1, 2).reshape({B, T, C})));
}

void ParallelAttention::visit(nn::Visitor& v) {
  v("c_attn", c_attn);
  v("c_proj", c_proj);
  v("resid_dropout", resid_dropout);
}

ParallelMLP::ParallelMLP(const nn::MLP& whole, const Plan& p)
    : c_fc(whole.c_fc, p.group,
           {.sequence_parallel = p.options.sequence_parallel,
            .placements = p.options.placements.get()}),
      gelu(whole.gelu),
      c_proj(whole.c_proj, p.group,
             {.sequence_parallel = p.options.sequence_parallel,
              .placements = p.options.placements.get()}),
      dropout(whole.dropout.p),
      plan(p) {}

Tensor ParallelMLP::forward(const Tensor& x) const {
  return region_dropout(dropout, plan, c_proj(tandem::gelu(c_fc(x), gelu)));
}

void ParallelMLP::visit(nn::Visitor& v) {
  v("c_fc", c_fc);
  v("c_proj", c_proj);
  v("dropout", dropout);
}

ParallelBlock::ParallelBlock(const nn::Block& whole, const Plan& plan)
    : ln_1(nn::clone(whole.ln_1)),
      attn(whole.attn, plan),
      ln_2(nn::clone(whole.ln_2)),
      mlp(whole.mlp, plan) {}

Tensor ParallelBlock::forward(const Tensor& x) const {
  const Tensor h = x + attn(ln_1(x));
  return h + mlp(ln_2(h));
}

void ParallelBlock::visit(nn::Visitor& v) {
  v("ln_1", ln_1);
  v("attn", attn);
  v("ln_2", ln_2);
  v("mlp", mlp);
}

ParallelGPTEmbedding::ParallelGPTEmbedding(const nn::GPTEmbedding& whole, const Plan& p)
    : block_size(whole.block_size),
      wte(whole.wte, p.group, p.options.placements.get()),
      wpe(nn::clone(whole.wpe)),
      drop(whole.drop.p),
      plan(p) {}

Tensor ParallelGPTEmbedding::forward(const Tensor& ids) const {
  TD_CHECK_SHAPE(ids.dim() == 2, "GPT: token ids must be [B, T], not ", ids.shape());
  const int64_t T = ids.size(1);
  TD_CHECK_SHAPE(T <= block_size, "GPT: a sequence of ", T,
                 " tokens is longer than the block size ", block_size);
  if (!plan.options.sequence_parallel) {
    const Tensor positions = arange(double(T), {.dtype = kInt64, .device = ids.device()});
    return drop(wte(ids) + wpe(positions));
  }
  // Each rank's partial lookups, summed over the group straight into this rank's positions.
  const Tensor tokens = reduce_scatter_to_sequence_parallel_region(wte.partial(ids), plan.group);
  const int64_t mine = tokens.size(1), first = plan.group->rank() * mine;
  const Tensor positions =
      arange(double(first), double(first + mine), 1, {.dtype = kInt64, .device = ids.device()});
  return region_dropout(drop, plan, tokens + wpe(positions));
}

void ParallelGPTEmbedding::visit(nn::Visitor& v) {
  v("wte", wte);
  v("wpe", wpe);
  v("drop", drop);
}

ParallelLMHead::ParallelLMHead(Tensor w, Plan p, int64_t vocab_start, int64_t vocab_size)
    : weight(std::move(w)), plan(std::move(p)) {
  const int64_t rows = weight.size(0);
  tokens = std::clamp(vocab_size - vocab_start, int64_t{0}, rows);
  TD_CHECK_VALUE(tokens > 0, "tensor_parallel_gpt: rank ", plan.group->rank(), " of ",
                 plan.group->size(), " would hold no token of the ", vocab_size,
                 "-token vocabulary (its rows ", vocab_start, "..", vocab_start + rows - 1,
                 " are all padding); use fewer tensor-parallel ranks or less padding");
}

Tensor ParallelLMHead::forward(const Tensor& x) const {
  // Every rank reads all of x, so x's gradient is the sum of every rank's part: f, or, with
  // sequence parallelism, the all-gather whose backward reduce-scatters.
  const Tensor whole = plan.options.sequence_parallel
                           ? gather_from_sequence_parallel_region(x, plan.group)
                           : copy_to_tensor_parallel_region(x, plan.group);
  if (tokens == weight.size(0)) return linear(whole, weight, Tensor());
  // The padding's columns: −∞, not computed from its rows (which so get no gradient); exp gives
  // them 0 in the loss's sums. One device's head leaves them out (nn::LMHead); here every rank's
  // part keeps its width, as the vocabulary-parallel loss reads them.
  const Tensor logits = linear(whole, weight.narrow(0, 0, tokens), Tensor());
  Shape pad = logits.shape();
  pad.back() = weight.size(0) - tokens;
  return cat({logits, full(pad, -std::numeric_limits<double>::infinity(), logits.options())}, -1);
}

nn::Sequential tensor_parallel_gpt(nn::Sequential& gpt, const Group& group,
                                   TensorParallelOptions options) {
  TD_CHECK_VALUE(group != nullptr, "tensor_parallel_gpt: no tensor-parallel group");
  // Always recorded: a wrapper given no table adopts these cuts (placement.h).
  if (!options.placements) options.placements = std::make_shared<PlacementTable>();
  Plan plan{group, options, nullptr};
  nn::Sequential out;
  nn::ActivationCheckpointOptions checkpoint;  // a checkpointed item's
  for (const nn::NamedModule& item : gpt.items()) {
    nn::Module& m = item.module.get();
    if (auto* e = dynamic_cast<nn::GPTEmbedding*>(&m)) {
      const uint64_t seed = default_generator(e->wte.weight.device()).get_state().seed;
      plan.rank_stream = std::make_shared<Generator>(seed + 2718 + uint64_t(group->rank()));
      out.push_back(item.name, ParallelGPTEmbedding(*e, plan));
    } else if (auto* b = dynamic_cast<nn::Block*>(&m)) {
      out.push_back(item.name, ParallelBlock(*b, plan));
    } else if (const nn::Block* cb = checkpointed_block(m, &checkpoint)) {
      // Activation checkpointing kept, with its options: the slices' block, recomputed in
      // backward (its collectives run again there, in the same order on every rank).
      out.push_back(item.name,
                    nn::Checkpointed(nn::AnyModule(ParallelBlock(*cb, plan)), checkpoint));
    } else if (auto* ln = dynamic_cast<nn::LayerNorm*>(&m)) {
      out.push_back(item.name, nn::clone(*ln));
    } else if (auto* head = dynamic_cast<nn::LMHead*>(&m)) {
      // The tie, kept: the head's weight is this rank's slice of the table, the same tensor.
      const VocabParallelEmbedding& wte = out.at<ParallelGPTEmbedding>(0).wte;
      out.push_back(item.name, ParallelLMHead(wte.weight, plan, wte.vocab_start, head->vocab_size));
    } else {
      TD_CHECK_VALUE(false, "tensor_parallel_gpt: item '", item.name, "' (", m.type_name(),
                     ") is not part of nn::gpt's model; the plan knows GPTEmbedding, Block "
                     "(checkpointed or not), LayerNorm and LMHead");
    }
    TD_CHECK_VALUE(plan.rank_stream != nullptr,
                   "tensor_parallel_gpt: the model must start with "
                   "its GPTEmbedding (nn::gpt's order)");
  }
  // The rest replicated; their gradients partial under SP.
  options.placements->add_dimension(kDimension, group);
  for (auto& [name, p] : out.named_parameters()) {
    const PlacedTensor& e = options.placements->record(p, name);
    if (options.sequence_parallel && std::holds_alternative<Replicate>(e.along(kDimension)))
      options.placements->place(p, kDimension, Partial{});
  }
  return out;
}

std::shared_ptr<Generator> rank_stream(nn::Sequential& tp_gpt) {
  // The first module of the plan it holds (a pipeline stage may begin with any block).
  for (const auto& item : tp_gpt.items()) {
    const std::shared_ptr<nn::Module> m = item.module.ptr();
    if (auto* e = dynamic_cast<ParallelGPTEmbedding*>(m.get())) return e->plan.rank_stream;
    if (auto* b = dynamic_cast<ParallelBlock*>(m.get())) return b->attn.plan.rank_stream;
    if (auto* h = dynamic_cast<ParallelLMHead*>(m.get())) return h->plan.rank_stream;
    if (auto* c = dynamic_cast<nn::Checkpointed*>(m.get()))
      if (auto* b = dynamic_cast<ParallelBlock*>(&c->module())) return b->attn.plan.rank_stream;
  }
  TD_CHECK_VALUE(false,
                 "tp::rank_stream: not a model of tensor_parallel_gpt (nor a stage of one "
                 "with an embedding or a block)");
  return nullptr;
}

int64_t padded_vocab_size(int64_t vocab_size, int64_t tp_size, int64_t multiple) {
  TD_CHECK_VALUE(vocab_size > 0 && tp_size > 0 && multiple > 0,
                 "padded_vocab_size: expected positive sizes, got vocab_size ", vocab_size,
                 ", tp_size ", tp_size, ", multiple ", multiple);
  const int64_t m = std::lcm(tp_size, multiple);
  return (vocab_size + m - 1) / m * m;
}

Tensor gpt_loss(const Tensor& logits, const Tensor& targets, const Group& group) {
  TD_CHECK_SHAPE(logits.dim() == 3, "tp::gpt_loss: logits must be [B, T, V/t], not ",
                 logits.shape());
  return vocab_parallel_cross_entropy(logits, targets, group->rank() * logits.size(2), group);
}

}  // namespace tandem::parallel::tp
