// parallel/ddp/zero_shards.cpp — the chunk arithmetic, the pieces, and ZeRO's collectives
// (reduce-scatter of gradients, all-gather of parameters; the clipping norm reads the pieces from
// DDP's placement table, parallel/clip_grad_norm.h).
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/core/trace.h>
#include <tandem/parallel/ddp/zero_shards.h>
#include <algorithm>
#include <cmath>
#include <deque>

namespace tandem::parallel {

ZeroShards::ZeroShards(int stage, std::vector<Tensor> params, std::vector<std::string> names,
                       const std::vector<std::vector<size_t>>& buckets,
                       std::shared_ptr<Communicator> group)
    : stage_(stage),
      params_(std::move(params)),
      names_(std::move(names)),
      buckets_(buckets),
      offsets_(params_.size()),
      piece_of_(params_.size(), -1),
      group_(std::move(group)) {
  TD_CHECK_VALUE(stage == 1 || stage == 2, "ZeRO: stage must be 1 or 2 in DDP, got ", stage);
  const int64_t world = group_->size(), rank = group_->rank();
  NoGradGuard no_grad;
  std::vector<int64_t> owned(size_t(world), 0);  // elements each rank owns (padding aside)
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t n = 0;
    for (size_t i : buckets_[b]) {
      TD_CHECK_VALUE(params_[i].is_contiguous(), "ZeRO: parameter '", names_[i],
                     "' is not contiguous; its pieces must be views of its storage");
      offsets_[i] = n;
      n += params_[i].numel();
    }
    const int64_t c = (n + world - 1) / world;  // padded to c·world: every rank owns c
    chunk_.push_back(c);
    for (int64_t r = 0; r < world; ++r)
      owned[size_t(r)] += std::max<int64_t>(0, std::min(n, r * c + c) - r * c);
    const Tensor& first = params_[buckets_[b].front()];
    // Stage 2 keeps its averaged chunk here; stage 1 in its bucket buffer (reduce_scatter).
    grad_chunk_.push_back(
        stage == 2 ? zeros({c}, {.dtype = first.dtype(), .device = first.device()}) : Tensor());
    bucket_buffer_.emplace_back();
    // This rank owns [begin, end) of the bucket; each parameter overlapping it gives one piece.
    const int64_t begin = rank * c, end = std::min(n, begin + c);
    for (size_t i : buckets_[b]) {
      const int64_t lo = std::max(begin, offsets_[i]);
      const int64_t hi = std::min(end, offsets_[i] + params_[i].numel());
      if (lo >= hi) continue;
      Tensor view =
          params_[i].detach().reshape({params_[i].numel()}).narrow(0, lo - offsets_[i], hi - lo);
      view.requires_grad_(true);
      piece_of_[i] = int(pieces_.size());
      pieces_.push_back({i, b, lo - begin, lo - offsets_[i], hi - lo, view});
    }
  }
  // Checked for every rank on every rank, so that all fail alike instead of one leaving the
  // others waiting in a collective.
  for (int64_t r = 0; r < world; ++r)
    TD_CHECK_VALUE(owned[size_t(r)] > 0, "ZeRO: rank ", r, " of ", world,
                   " would own no parameter element: the buckets are smaller than the world\n  "
                   "hint: use fewer ranks, or plain DDP for a model this small");
}

WorkPtr ZeroShards::reduce_scatter(size_t bucket, const Tensor& buffer) {
  if (stage_ == 1) {
    // In place where the group can: the averaged chunk lands in the buffer's own chunk.
    Tensor mine = buffer.narrow(0, group_->rank() * chunk_[bucket], chunk_[bucket]);
    std::vector<Tensor> whole{buffer};
    if (WorkPtr work = group_->reduce_scatter_coalesced(mine, whole, ReduceOp::Mean)) {
      grad_chunk_[bucket] = mine;
      return work;
    }
    // Else into a scratch chunk, copied into the buffer's own chunk by publish_gradients(): a
    // collective's output must not overlap its input, and the buffer stays between steps anyway,
    // so the averaged chunk costs nothing more once the scratch is gone.
    grad_chunk_[bucket] =
        empty({chunk_[bucket]}, {.dtype = buffer.dtype(), .device = buffer.device()});
    bucket_buffer_[bucket] = buffer;
  }
  return group_->reduce_scatter(grad_chunk_[bucket], buffer, ReduceOp::Mean);
}

WorkPtr ZeroShards::reduce_scatter_gradients(size_t bucket, std::vector<Tensor>& grads) {
  TD_CHECK_VALUE(stage_ == 2, "ZeRO: only stage 2 reduces gradients where they lie");
  return group_->reduce_scatter_coalesced(grad_chunk_[bucket], grads, ReduceOp::Mean);
}

void ZeroShards::publish_gradients(const Tensor& used) {
  if (stage_ == 1) {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (!bucket_buffer_[b].defined()) continue;  // reduced in place
      Tensor mine = bucket_buffer_[b].narrow(0, group_->rank() * chunk_[b], chunk_[b]);
      mine.copy_(grad_chunk_[b]);
      grad_chunk_[b] = mine;  // the scratch is freed
      bucket_buffer_[b] = Tensor();
    }
  }
  for (Piece& p : pieces_) {
    // A parameter no rank used keeps no gradient, as on one device (the optimizer skips it).
    if (used.defined() && used.data<float>()[p.param] == 0.f) continue;
    p.view.set_grad(grad_chunk_[p.bucket].narrow(0, p.at, p.len));
  }
}

size_t ZeroShards::index_of(const Tensor& param) const {
  size_t i = 0;
  while (i < params_.size() && !params_[i].is_same(param)) ++i;
  TD_CHECK_VALUE(i < params_.size(), "ZeRO: an optimizer parameter (", describe(param),
                 ") is not a parameter of the module DDP wraps\n  hint: build the optimizer "
                 "from the wrapped module's parameters");
  return i;
}

std::vector<Tensor> ZeroShards::pieces_of(const std::vector<Tensor>& params) const {
  std::vector<Tensor> out;
  for (const Tensor& t : params) {
    const int k = piece_of_[index_of(t)];
    if (k >= 0) out.push_back(pieces_[size_t(k)].view);
  }
  return out;
}

ZeroShards::Gather ZeroShards::start_gather(size_t b, const std::vector<Tensor>& values) {
  const int64_t world = group_->size();
  const Tensor& first = params_[buckets_[b].front()];
  Gather g{b,
           empty({chunk_[b] * world}, {.dtype = first.dtype(), .device = first.device()}),
           {},
           nullptr};
  for (int64_t r = 0; r < world; ++r)
    g.outputs.push_back(g.flat.narrow(0, r * chunk_[b], chunk_[b]));
  Tensor mine = zeros({chunk_[b]}, {.dtype = first.dtype(), .device = first.device()});
  for (size_t k = 0; k < pieces_.size(); ++k)
    if (pieces_[k].bucket == b && values[k].defined())
      mine.narrow(0, pieces_[k].at, pieces_[k].len).copy_(values[k]);
  g.work = group_->all_gather(g.outputs, mine);
  return g;
}

Tensor ZeroShards::all_gather_bucket(size_t b, const std::vector<Tensor>& values) {
  Gather g = start_gather(b, values);
  g.work->wait();
  return g.flat;
}

void ZeroShards::gather_parameters() {
  NoGradGuard no_grad;
  const trace::Scope span("zero", trace::enabled() ? "all-gather parameters" : "");
  // Straight into the parameters where the group can: every bucket at once, as nothing is held
  // but the parameters themselves. (The group answers alike for every bucket: its device.)
  std::vector<WorkPtr> in_place;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    std::vector<Tensor> flat;
    for (size_t i : buckets_[b]) flat.push_back(params_[i].detach().reshape({params_[i].numel()}));
    WorkPtr work = group_->all_gather_in_place(flat, chunk_[b]);
    if (!work) break;
    in_place.push_back(std::move(work));
  }
  for (const WorkPtr& w : in_place) w->wait();
  if (in_place.empty()) gather_through_buffers();
}

void ZeroShards::gather_through_buffers() {
  std::vector<Tensor> values;  // every piece: the updated parameters this rank sends
  for (const Piece& p : pieces_) values.push_back(p.view);
  // Two buckets on the wire at a time: overlap without holding a second copy of the model.
  std::deque<Gather> flying;
  auto land = [&] {
    Gather& g = flying.front();
    g.work->wait();
    for (size_t i : buckets_[g.bucket]) {
      Tensor p = params_[i].detach().reshape({params_[i].numel()});
      p.copy_(g.flat.narrow(0, offsets_[i], params_[i].numel()));
    }
    flying.pop_front();
  };
  for (size_t b = 0; b < buckets_.size(); ++b) {
    flying.push_back(start_gather(b, values));
    if (flying.size() > 1) land();
  }
  while (!flying.empty()) land();
}

}  // namespace tandem::parallel
