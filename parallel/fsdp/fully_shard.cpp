// parallel/fsdp/fully_shard.cpp — building the units, and the order of their collectives in
// forward and backward. Every rank runs the same graph, so every rank issues the same collectives
// in the same order: all-gathers as forward and backward reach the units, reduce-scatters
// strictly from the last unit to the first (then the root's), whatever order gradients finish in.
#include <tandem/autograd/engine.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/saved_tensor.h>
#include <tandem/core/check.h>
#include <tandem/core/layout.h>
#include <tandem/parallel/fsdp/fsdp_state.h>
#include <tandem/parallel/fsdp/fully_shard.h>
#include <tandem/parallel/process_group.h>
#include <map>
#include <set>

namespace tandem::parallel {
namespace {

// What a unit's ops saved of a whole parameter: which one, and the view of it they saved.
struct ParamNote {
  size_t unit, index;
  Shape shape;
  Strides strides;
  int64_t offset;
};

}  // namespace

FullyShardedModule::FullyShardedModule(nn::Sequential model, FullyShardOptions options)
    : FullyShardedModule(std::make_shared<nn::Sequential>(std::move(model)), std::move(options)) {}

FullyShardedModule::FullyShardedModule(std::shared_ptr<nn::Sequential> model,
                                       FullyShardOptions options)
    : model_(std::move(model)), state_(std::make_shared<State>()) {
  TD_CHECK_VALUE(model_ != nullptr, "fully_shard: the model is null");
  State& s = *state_;
  s.options = options;
  s.group = options.group;
  if (!s.group) {
    TD_CHECK_AS(DistributedError, is_initialized(),
                "fully_shard: no process group\n  hint: call parallel::init_process_group() "
                "first (under `tandem launch`), or pass .group");
    s.group = std::shared_ptr<Communicator>(&default_group(), [](Communicator*) {});
  }
  {  // Every rank starts from rank 0's values, as DDP (and FSDP's sync_module_states).
    NoGradGuard no_grad;
    for (auto& [name, t] : model_->named_parameters()) {
      Tensor d = t.detach();
      s.group->broadcast(d, 0)->wait();
    }
    for (auto& [name, t] : model_->named_buffers()) s.group->broadcast(t, 0)->wait();
  }
  // Where each parameter is referred to: (item, field) pairs, and its first full name.
  struct Uses {
    std::vector<std::pair<size_t, Tensor*>> slots;
    std::set<size_t> items;
    std::string name;
    size_t order;
  };
  std::map<const TensorImpl*, Uses> uses;
  const auto& items = model_->items();
  for (size_t k = 0; k < items.size(); ++k)
    nn::for_each_tensor(items[k].module.get(), [&](const std::string& n, Tensor& t, bool buf) {
      if (buf || !t.defined()) return;
      auto [it, fresh] = uses.try_emplace(&t.impl());
      if (fresh) {
        it->second.name = items[k].name + (n.empty() ? "" : "." + n);
        it->second.order = uses.size() - 1;
      }
      it->second.slots.emplace_back(k, &t);
      it->second.items.insert(k);
    });
  TD_CHECK_VALUE(!uses.empty(), "fully_shard: the model has no parameters");
  s.placements = options.placements ? options.placements : std::make_shared<PlacementTable>();
  s.placements->add_dimension(options.mesh_dim, s.group);
  // Each item's own parameters make its unit; the shared ones, the root's.
  std::vector<std::vector<const Uses*>> own(items.size());
  std::vector<const Uses*> shared;
  std::vector<const Uses*> ordered(uses.size());
  for (auto& [impl, u] : uses) ordered[u.order] = &u;
  for (const Uses* u : ordered)
    (u->items.size() == 1 ? own[*u->items.begin()] : shared).push_back(u);
  s.item_unit.assign(items.size(), State::kNone);
  s.item_slots.resize(items.size());
  auto make_unit = [&](const std::string& name, const std::vector<const Uses*>& members) {
    std::vector<Tensor> params;
    std::vector<std::string> names;
    for (const Uses* u : members) {
      params.push_back(*u->slots.front().second);
      names.push_back(u->name);
    }
    const size_t index = s.units.size();
    s.units.push_back(std::make_shared<ShardedUnit>(name, params, names, s.group,
                                                    options.param_dtype, options.reduce_dtype));
    for (size_t i = 0; i < params.size(); ++i) {  // torch.chunk's rows, padded to W chunks
      const Shape& shape = params[i].shape();
      const int64_t rows = shape.empty() ? 1 : shape[0], world = s.group->size();
      const int64_t padding = (rows + world - 1) / world * world - rows;
      s.placements->record(params[i], names[i]);
      s.placements->replace(params[i], s.units.back()->shards()[i], options.mesh_dim,
                            Shard{.dim = 0, .blocks = 1, .padding = padding});
    }
    for (size_t i = 0; i < members.size(); ++i)
      for (auto [k, slot] : members[i]->slots) s.item_slots[k].push_back({slot, index, i});
    return index;
  };
  for (size_t k = 0; k < items.size(); ++k)
    if (!own[k].empty()) s.item_unit[k] = make_unit(items[k].name, own[k]);
  if (!shared.empty()) s.root = make_unit("(shared)", shared);
  s.wire_units(state_);
  for (size_t k = 0; k < items.size(); ++k) s.restore(k);  // the whole tensors go
}

FullyShardedModule::~FullyShardedModule() = default;

void FullyShardedModule::visit(nn::Visitor& v) {
  {
    std::lock_guard lk(state_->mutex);
    state_->recover_from_failed_backward();  // the fields then hold the shards
  }
  v("", *model_);
}

Communicator& FullyShardedModule::group() { return *state_->group; }

int64_t FullyShardedModule::whole_parameter_count() const {
  int64_t n = 0;
  for (const auto& unit : state_->units)
    for (size_t i = 0; i < unit->size(); ++i) n += numel(unit->shape(i));
  return n;
}
const std::vector<std::shared_ptr<ShardedUnit>>& FullyShardedModule::units() const {
  return state_->units;
}

FullyShardedModule::NoSync::NoSync(FullyShardedModule& m) : m_(&m) { m.state_->sync = false; }
void FullyShardedModule::set_is_last_backward(bool last) { state_->last_backward = last; }
FullyShardedModule::NoSync::~NoSync() { m_->state_->sync = true; }

Tensor FullyShardedModule::forward(const Tensor& input) {
  return forward_items(input, 0, model_->items().size());
}

Tensor FullyShardedModule::forward_items(const Tensor& input, size_t first, size_t end) {
  TD_CHECK_INDEX(first <= end && end <= model_->items().size(), "fully_shard: items [", first, ", ",
                 end, ") of a model of ", model_->items().size());
  State& s = *state_;
  const bool grad = GradMode::is_enabled();
  const bool reshard = s.options.reshard_after_forward || !grad;
  Tensor x = input;
  if (s.options.param_dtype && is_floating(x.dtype())) x = x.to(*s.options.param_dtype);
  {
    std::lock_guard lk(s.mutex);
    s.begin_forward();
    if (s.root != State::kNone) s.units[s.root]->finish_gather(grad);
  }
  const auto& items = model_->items();
  for (size_t k = first; k < end; ++k) {
    const size_t u = s.item_unit[k];
    {
      std::lock_guard lk(s.mutex);
      if (u != State::kNone) {
        s.units[u]->finish_gather(grad);
        if (const size_t next = s.next_unit(u); next != State::kNone) s.units[next]->start_gather();
      }
      s.install(k);
    }
    Tensor y;
    try {
      std::optional<SavedTensorHooks> notes;  // the unit's ops keep notes, not its parameters
      if (grad && s.options.reshard_after_forward && u != State::kNone)
        notes.emplace(s.pack_hook(state_, u), s.unpack_hook(state_));
      y = items[k].module.forward(x);
    } catch (...) {
      std::lock_guard lk(s.mutex);
      s.restore(k);  // the fields hold shards again; the next forward starts afresh
      throw;
    }
    std::lock_guard lk(s.mutex);
    s.restore(k);
    if (u == State::kNone) {
      x = y;
      continue;
    }
    if (reshard) s.units[u]->reshard();
    if (y.requires_grad())
      y.register_hook([weak = std::weak_ptr<State>(state_), u](const Tensor&) {
        if (auto st = weak.lock()) st->before_backward(weak, u);
        return Tensor();
      });
    x = y;
  }
  if (!grad) {
    std::lock_guard lk(s.mutex);
    for (auto& unit : s.units) unit->reshard();
  }
  return x;
}

const std::shared_ptr<PlacementTable>& FullyShardedModule::placements() const {
  return state_->placements;
}

// ---- State: the hooks' side ----

void FullyShardedModule::State::wire_units(const std::shared_ptr<State>& self) {
  for (size_t u = 0; u < units.size(); ++u) {
    units[u]->on_complete = [weak = std::weak_ptr<State>(self)] {
      if (auto s = weak.lock()) s->unit_complete();
    };
    if (u != root) order.insert(order.begin(), u);  // the last unit's gradients come first
  }
  if (root != kNone) order.push_back(root);
}

size_t FullyShardedModule::State::next_unit(size_t u) const {
  for (size_t k = 0; k < item_unit.size(); ++k)
    if (item_unit[k] != kNone && item_unit[k] > u) return item_unit[k];
  return kNone;
}

void FullyShardedModule::State::install(size_t item) {
  for (const Slot& sl : item_slots[item]) {
    // An item may read another unit's parameters too (the shared root's: a tied embedding).
    // When backward runs in several calls (a pipeline's micro-batches, one call each), the end
    // of one resharded that unit: gather it again, without recording (the graph holds the
    // recorded whole tensors of its forward).
    if (!units[sl.unit]->gathered()) units[sl.unit]->finish_gather(false);
    *sl.tensor = units[sl.unit]->full(sl.index);
  }
}

void FullyShardedModule::State::restore(size_t item) {
  for (const Slot& sl : item_slots[item]) *sl.tensor = units[sl.unit]->shards()[sl.index];
}

void FullyShardedModule::State::recover_from_failed_backward() {
  // A backward that failed part-way (a hook or an op threw) never reached end_of_backward(): its
  // gradients are incomplete, so drop them, as every rank does alike, and put the shards back
  // into the fields its hooks filled.
  if (!callback_queued || in_backward_pass()) return;
  for (auto& unit : units) {
    unit->abandon_gradients();
    unit->reshard();
  }
  reducing.clear();
  next_launch = 0;
  callback_queued = false;
  for (size_t k = 0; k < item_slots.size(); ++k) restore(k);
}

void FullyShardedModule::State::begin_forward() {
  recover_from_failed_backward();
  // A forward that no backward followed (an evaluation with grad mode on) left units gathered:
  // gather afresh, so that this forward's graph reaches the shards.
  for (auto& unit : units) unit->reshard();
  for (size_t k = 0; k < item_slots.size(); ++k) restore(k);
}

std::function<std::any(const Tensor&)> FullyShardedModule::State::pack_hook(
    const std::shared_ptr<State>& self, size_t u) {
  return [weak = std::weak_ptr<State>(self), u](const Tensor& t) -> std::any {
    auto s = weak.lock();
    if (!s) return t;
    const auto i = s->units[u]->owner_of(t);
    if (!i) return t;  // an activation: kept as it is
    return ParamNote{u, *i, t.shape(), t.strides(), t.storage_offset()};
  };
}

std::function<Tensor(const std::any&)> FullyShardedModule::State::unpack_hook(
    const std::shared_ptr<State>& self) {
  return [weak = std::weak_ptr<State>(self)](const std::any& packed) -> Tensor {
    if (const Tensor* t = std::any_cast<Tensor>(&packed)) return *t;
    const auto& note = std::any_cast<const ParamNote&>(packed);
    auto s = weak.lock();
    TD_CHECK_AS(AutogradError, s != nullptr,
                "fully_shard: backward after the FullyShardedModule was destroyed");
    std::lock_guard lk(s->mutex);
    ShardedUnit& unit = *s->units[note.unit];
    unit.finish_gather(false);  // normally done already, by the unit's pre-backward hook
    return tandem::detail::as_strided(unit.full(note.index), note.shape, note.strides, note.offset);
  };
}

void FullyShardedModule::State::queue_end_of_backward(const std::weak_ptr<State>& self) {
  if (callback_queued) return;
  callback_queued = true;
  queue_callback([self] {
    if (auto s = self.lock()) s->end_of_backward();
  });
}

void FullyShardedModule::State::before_backward(const std::weak_ptr<State>& self, size_t u) {
  std::lock_guard lk(mutex);
  queue_end_of_backward(self);
  units[u]->finish_gather(false);
  for (size_t k = 0; k < item_unit.size(); ++k)
    if (item_unit[k] == u) install(k);  // for an activation-checkpoint recompute
  // Prefetch: the unit before this one runs its backward next.
  for (size_t k = item_unit.size(); k-- > 0;)
    if (const size_t p = item_unit[k]; p != kNone && p < u) {
      if (units[p]->recorded()) units[p]->start_gather();
      break;
    }
}

void FullyShardedModule::State::unit_complete() {
  std::lock_guard lk(mutex);
  if (!sync) return;
  launch_ready(false);
}

void FullyShardedModule::State::launch_ready(bool all) {
  for (; next_launch < order.size(); ++next_launch) {
    ShardedUnit& unit = *units[order[next_launch]];
    if (!unit.recorded()) continue;  // not in this iteration's graph
    if (!all && unit.pending() > 0) return;
    // One reduce-scatter on the wire at a time, as FSDP2 (each holds its unit's whole-size
    // gradient buffer): the previous one, queued a layer of compute ago, is normally done. Two
    // cost a layer's bytes more at the peak and no measurable step time (bench/RESULTS.md).
    while (!reducing.empty()) {
      units[reducing.front()]->finish_reduce_scatter();
      reducing.pop_front();
    }
    unit.start_reduce_scatter();
    reducing.push_back(order[next_launch]);
    if (order[next_launch] != root) {
      unit.reshard();
      for (size_t k = 0; k < item_unit.size(); ++k)
        if (item_unit[k] == order[next_launch]) restore(k);
    }
  }
}

void FullyShardedModule::State::end_of_backward() {
  std::lock_guard lk(mutex);
  callback_queued = false;
  const bool last = last_backward;
  if (sync) {
    launch_ready(/*all=*/last);  // before the last backward, a unit may wait for another's
    for (size_t u : reducing) units[u]->finish_reduce_scatter();
    reducing.clear();
  }
  for (auto& unit : units) {
    unit->reshard();
    if (last) unit->end_iteration();
  }
  for (size_t k = 0; k < item_slots.size(); ++k) restore(k);
  next_launch = 0;
}

}  // namespace tandem::parallel
