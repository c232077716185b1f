// parallel/fsdp/sharded_unit.cpp — the flat layout, the unshard op, and the unit's all-gather and
// reduce-scatter.
#include <tandem/autograd/autograd_meta.h>
#include <tandem/autograd/engine.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/record.h>
#include <tandem/core/check.h>
#include <tandem/core/trace.h>
#include <tandem/parallel/fsdp/sharded_unit.h>

namespace tandem::parallel {

ShardedUnit::ShardedUnit(std::string name, const std::vector<Tensor>& params,
                         std::vector<std::string> param_names, std::shared_ptr<Communicator> group,
                         std::optional<DType> param_dtype, std::optional<DType> reduce_dtype)
    : name_(std::move(name)), names_(std::move(param_names)), group_(std::move(group)) {
  TD_CHECK_VALUE(!params.empty(), "fully_shard: unit '", name_, "' has no parameters");
  const int64_t world = group_->size(), rank = group_->rank();
  shard_dtype_ = params.front().dtype();
  param_dtype_ = param_dtype.value_or(shard_dtype_);
  reduce_dtype_ = reduce_dtype.value_or(shard_dtype_);
  NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    TD_CHECK_VALUE(p.dtype() == shard_dtype_ && p.device() == params.front().device(),
                   "fully_shard: unit '", name_, "' mixes ", names_.front(), " (",
                   params.front().dtype(), " on ", params.front().device(), ") with ", names_[i],
                   " (", p.dtype(), " on ", p.device(), "); give a unit one dtype and device");
    Layout l;
    l.shape = p.shape();
    l.rows = p.dim() == 0 ? 1 : p.size(0);
    l.row = l.rows == 0 ? 0 : p.numel() / l.rows;
    l.chunk = (l.rows + world - 1) / world;
    l.at = flat_;
    flat_ += l.chunk * l.row;
    layout_.push_back(l);
    // This rank's rows, a private copy: the whole tensor goes once every unit is built.
    Shape mine = l.shape.empty() ? Shape{1} : l.shape;
    mine[0] = l.rows_of(rank);
    Tensor rows =
        p.reshape({l.rows, l.row}).narrow(0, std::min(rank * l.chunk, l.rows), mine[0]).clone();
    shards_.push_back(rows.reshape(mine).requires_grad_(p.requires_grad()));
  }
  grads_.resize(params.size());
}

Tensor ShardedUnit::flat_of(const std::vector<Tensor>& values, DType dtype) const {
  Tensor flat = zeros({flat_}, {.dtype = dtype, .device = shards_.front().device()});
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].defined() && values[i].numel() > 0)
      flat.narrow(0, layout_[i].at, values[i].numel()).copy_(values[i].reshape({-1}));
  return flat;
}

Tensor ShardedUnit::whole_from(const Tensor& all, size_t i) const {
  const Layout& l = layout_[i];
  Tensor whole = empty(l.shape, {.dtype = all.dtype(), .device = all.device()});
  Tensor rows = whole.reshape({l.rows, l.row});
  for (int64_t r = 0; r < group_->size(); ++r)
    if (const int64_t n = l.rows_of(r); n > 0)
      rows.narrow(0, r * l.chunk, n)
          .copy_(all.narrow(0, r * flat_ + l.at, n * l.row).view({n, l.row}));
  return whole;
}

std::vector<Tensor> ShardedUnit::rank_major(const std::vector<Tensor>& padded) const {
  std::vector<Tensor> slices;
  for (int64_t r = 0; r < group_->size(); ++r)
    for (size_t i = 0; i < layout_.size(); ++i) {
      const Layout& l = layout_[i];
      slices.push_back(padded[i].narrow(0, r * l.chunk * l.row, l.chunk * l.row));
    }
  return slices;
}

void ShardedUnit::start_gather() {
  if (gather_work_ || gathered()) return;
  NoGradGuard no_grad;
  const int64_t world = group_->size(), rank = group_->rank();
  if (in_place_) {
    // Each whole parameter with its padding rows (W·c), this rank's rows copied in from its
    // shard: the peers' rows are gathered straight into it, with nothing to copy out.
    for (size_t i = 0; i < shards_.size(); ++i) {
      const Layout& l = layout_[i];
      Tensor whole =
          empty({world * l.chunk * l.row}, {.dtype = param_dtype_, .device = shards_[i].device()});
      Tensor mine = whole.narrow(0, rank * l.chunk * l.row, l.chunk * l.row);
      mine.narrow(0, 0, shards_[i].numel()).copy_(shards_[i].reshape({-1}));
      mine.narrow(0, shards_[i].numel(), mine.numel() - shards_[i].numel()).fill_(0);  // padding
      padded_.push_back(std::move(whole));
    }
    std::vector<Tensor> slices = rank_major(padded_);
    gather_work_ = group_->all_gather_in_place(slices, flat_);
    if (gather_work_) return;
    in_place_ = false;  // the group's answer for its device: the same every time
    padded_.clear();
  }
  const Tensor mine = flat_of(shards_, param_dtype_);
  gathered_ = empty({world * flat_}, {.dtype = param_dtype_, .device = mine.device()});
  std::vector<Tensor> outputs;
  for (int64_t r = 0; r < world; ++r) outputs.push_back(gathered_.narrow(0, r * flat_, flat_));
  gather_work_ = group_->all_gather(outputs, mine);
}

void ShardedUnit::finish_gather(bool record) {
  if (gathered()) return;
  start_gather();
  {
    const trace::Scope span("fsdp", trace::enabled() ? "wait all-gather " + name_ : "");
    gather_work_->wait();
  }
  gather_work_ = nullptr;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const Layout& l = layout_[i];
    Tensor whole;
    {
      NoGradGuard no_grad;
      whole = padded_.empty() ? whole_from(gathered_, i)
                              : padded_[i].narrow(0, 0, l.rows * l.row).view(l.shape);
    }
    if (record && any_requires_grad({shards_[i]})) {
      // The shard is the op's input so that the graph knows a parameter is reached, but its
      // gradient comes back later through the reduce-scatter: backward hands the engine none.
      ++pending_;
      ++recorded_;
      whole = tandem::record(
          "fsdp_unshard", whole, {shards_[i]}, {},
          [unit = weak_from_this(), i](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
            if (auto u = unit.lock(); u && u->add_gradient(i, dy) && u->on_complete)
              u->on_complete();
            return {Tensor()};
          });
      gradient_node(whole)->gradients_elsewhere = true;
    }
    full_.push_back(std::move(whole));
  }
  gathered_ = Tensor();
  padded_.clear();  // the whole parameters hold their storage
}

void ShardedUnit::reshard() {
  full_.clear();
  if (gather_work_) gather_work_->wait();
  gather_work_ = nullptr;
  gathered_ = Tensor();
  padded_.clear();
}

void ShardedUnit::abandon_gradients() {
  std::lock_guard lk(mutex_);
  try {
    if (reduce_work_) reduce_work_->wait();
  } catch (const std::exception&) {  // the failure being recovered from, already reported
  }
  reduce_work_ = nullptr;
  reduced_ = Tensor();
  grads_.assign(grads_.size(), Tensor());
  end_iteration();
}

std::optional<size_t> ShardedUnit::owner_of(const Tensor& t) const {
  for (size_t i = 0; i < full_.size(); ++i)
    if (full_[i].impl().storage == t.impl().storage) return i;
  return std::nullopt;
}

bool ShardedUnit::add_gradient(size_t i, const Tensor& grad) {
  std::lock_guard lk(mutex_);
  NoGradGuard no_grad;
  // Held as it is until the reduce-scatter reads it (the engine never writes a gradient it has
  // handed on); a second pass (no_sync, a second use) adds to it out of place.
  const Tensor g = grad.to(reduce_dtype_).contiguous();
  grads_[i] = grads_[i].defined() ? grads_[i] + g : g;
  return --pending_ == 0;
}

Tensor ShardedUnit::padded_gradient(size_t i) const {
  const Layout& l = layout_[i];
  const int64_t padded = group_->size() * l.chunk * l.row;
  const Tensor& g = grads_[i];
  if (g.defined() && g.numel() == padded) return g.reshape({padded});  // its rows divide by W
  Tensor p = zeros({padded}, {.dtype = reduce_dtype_, .device = shards_[i].device()});
  if (g.defined()) p.narrow(0, 0, g.numel()).copy_(g.reshape({g.numel()}));
  return p;
}

void ShardedUnit::start_reduce_scatter() {
  std::lock_guard lk(mutex_);
  if (reduce_work_) return;
  NoGradGuard no_grad;
  const Tensor& first = shards_.front();
  const int64_t world = group_->size();
  reduced_ = empty({flat_}, {.dtype = reduce_dtype_, .device = first.device()});
  if (in_place_) {  // from the gradients where they lie (the collective holds them until done)
    std::vector<Tensor> padded;  // zeros where no gradient arrived (unused on this rank)
    for (size_t i = 0; i < layout_.size(); ++i) padded.push_back(padded_gradient(i));
    std::vector<Tensor> slices = rank_major(padded);
    reduce_work_ = group_->reduce_scatter_coalesced(reduced_, slices, ReduceOp::Mean);
    if (reduce_work_) {
      grads_.assign(grads_.size(), Tensor());
      return;
    }
    in_place_ = false;
  }
  // Packed: each gradient's rows of rank r at r·L + its offset; zeros for padding and for a
  // parameter that got none.
  Tensor flat = zeros({world * flat_}, {.dtype = reduce_dtype_, .device = first.device()});
  for (size_t i = 0; i < layout_.size(); ++i) {
    if (!grads_[i].defined()) continue;
    const Layout& l = layout_[i];
    const Tensor rows = grads_[i].reshape({l.rows, l.row});
    for (int64_t r = 0; r < world; ++r)
      if (const int64_t n = l.rows_of(r); n > 0)
        flat.narrow(0, r * flat_ + l.at, n * l.row)
            .copy_(rows.narrow(0, r * l.chunk, n).reshape({n * l.row}));
  }
  grads_.assign(grads_.size(), Tensor());
  reduce_work_ = group_->reduce_scatter(reduced_, flat, ReduceOp::Mean);
}

void ShardedUnit::finish_reduce_scatter() {
  {
    const trace::Scope span("fsdp", trace::enabled() ? "wait reduce-scatter " + name_ : "");
    reduce_work_->wait();
  }
  reduce_work_ = nullptr;
  NoGradGuard no_grad;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (!shards_[i].requires_grad()) continue;
    Tensor part = reduced_.narrow(0, layout_[i].at, shards_[i].numel());
    autograd::detail::accumulate_grad(shards_[i],
                                      part.reshape(shards_[i].shape()).to(shard_dtype_));
  }
  reduced_ = Tensor();
}

}  // namespace tandem::parallel
