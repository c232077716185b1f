// parallel/placement.cpp — the table's bookkeeping. Entries are found by tensor identity (the
// same TensorImpl), as an optimizer finds its parameters; a model has at most a few hundred.
#include <tandem/core/check.h>
#include <tandem/parallel/placement.h>

#include <mutex>
#include <unordered_map>

namespace tandem::parallel {
namespace {

bool divides_along(const Placement& p) {
  return std::holds_alternative<Shard>(p) || std::holds_alternative<Piece>(p);
}

// Every placement any table wrote, by tensor: what a table that meets the tensor later adopts.
// Without it, a tensor-parallel model wrapped by fully_shard or DDP with a table of their own
// (the user forgot to share TP's) would be recorded as whole tensors, and its gradient norm
// would silently miss the sum over "tp". FSDP2 reads TP's placement off the DTensor parameter
// for the same reason (_init_sharding_spec_tp). Keyed by the TensorImpl; the weak pointer tells a
// live tensor from a dead one whose address was reused. The groups are weak too: the registry
// must not keep a communicator alive past its run.
struct Seen {
  std::weak_ptr<TensorImpl> tensor;
  PlacedTensor entry;  // `local` left empty: the registry holds no tensor
  std::vector<std::tuple<std::string, std::weak_ptr<Communicator>, Across>> dims;
};

class Registry {
 public:
  static Registry& get() {
    static Registry r;
    return r;
  }

  void note(const PlacedTensor& e, const std::vector<PlacementTable::Dimension>& dims) {
    Seen seen{.tensor = e.local.impl_ptr(), .entry = e, .dims = {}};
    seen.entry.local = Tensor();
    for (const auto& [name, p] : e.placements)
      for (const PlacementTable::Dimension& d : dims)
        if (d.name == name) seen.dims.emplace_back(d.name, d.group, d.across);
    std::lock_guard<std::mutex> lock(mu_);
    if (seen_.size() >= prune_at_) {  // the dead tensors' records go, now and then
      std::erase_if(seen_, [](const auto& kv) { return kv.second.tensor.expired(); });
      prune_at_ = std::max<size_t>(1024, 2 * seen_.size());
    }
    seen_[e.local.impl_ptr().get()] = std::move(seen);
  }

  // The record another table wrote of `local`, with its dimensions' groups; false if none (or a
  // group of it is gone).
  bool find(const Tensor& local, Seen& out,
            std::vector<std::shared_ptr<Communicator>>& groups) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = seen_.find(local.impl_ptr().get());
    if (it == seen_.end() || it->second.tensor.lock() != local.impl_ptr()) return false;
    out = it->second;
    for (const auto& d : out.dims) {
      groups.push_back(std::get<1>(d).lock());
      if (!groups.back()) return false;
    }
    return true;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<const TensorImpl*, Seen> seen_;
  size_t prune_at_ = 1024;
};

}  // namespace

void PlacementTable::note(const PlacedTensor& e) const { Registry::get().note(e, dims_); }

PlacedTensor PlacementTable::fresh(const Tensor& local, const std::string& name) {
  PlacedTensor e{.local = local, .name = name, .whole = local.shape()};
  adopt(e);  // cut before, under another table: this one learns how
  return e;
}

void PlacementTable::adopt(PlacedTensor& e) {
  Seen seen;
  std::vector<std::shared_ptr<Communicator>> groups;
  if (!Registry::get().find(e.local, seen, groups)) return;
  for (size_t i = 0; i < seen.dims.size(); ++i)
    add_dimension(std::get<0>(seen.dims[i]), groups[i], std::get<2>(seen.dims[i]));
  e.whole = seen.entry.whole;
  e.placements = seen.entry.placements;
  e.counted = seen.entry.counted;
  if (e.name.empty()) e.name = seen.entry.name;
  for (const auto& [name, p] : e.placements)
    if (divides_along(p))
      for (Dimension& d : dims_) d.divided = d.divided || d.name == name;
}

std::string to_string(const Placement& p) {
  if (const auto* s = std::get_if<Shard>(&p))
    return str("Shard(dim ", s->dim, s->blocks > 1 ? str(", ", s->blocks, " blocks") : "",
               s->padding > 0 ? str(", padding ", s->padding) : "", ")");
  if (const auto* c = std::get_if<Piece>(&p))
    return str("Piece[", c->begin, ", ", c->begin + c->length, ")");
  return std::holds_alternative<Partial>(p) ? "Partial" : "Replicate";
}

Placement PlacedTensor::along(const std::string& dim) const {
  for (const auto& [d, p] : placements)
    if (d == dim) return p;
  return Replicate{};
}

void PlacementTable::add_dimension(const std::string& name, std::shared_ptr<Communicator> group,
                                   Across across) {
  TD_CHECK_VALUE(group != nullptr, "PlacementTable: mesh dimension '", name, "' has no group");
  for (const Dimension& d : dims_)
    if (d.name == name) {
      TD_CHECK_VALUE(d.group->size() == group->size() && d.across == across,
                     "PlacementTable: mesh dimension '", name, "' is already ", d.group->size(),
                     " ranks; a wrapper named it again with ", group->size());
      return;
    }
  dims_.push_back({name, std::move(group), across, false});
}

bool PlacementTable::has_dimension(const std::string& name) const {
  for (const Dimension& d : dims_)
    if (d.name == name) return true;
  return false;
}

Communicator& PlacementTable::group(const std::string& name) const {
  for (const Dimension& d : dims_)
    if (d.name == name) return *d.group;
  TD_CHECK_VALUE(false, "PlacementTable: no mesh dimension '", name, "' (", str(), ")");
  throw;  // unreachable
}

size_t PlacementTable::index_of(const Tensor& local) const {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].local.is_same(local)) return i;
  return entries_.size();
}

PlacedTensor& PlacementTable::record(const Tensor& local, const std::string& name) {
  TD_CHECK_VALUE(local.defined(), "PlacementTable: an undefined tensor ('", name, "')");
  const size_t i = index_of(local);
  if (i < entries_.size()) {
    if (entries_[i].name.empty()) entries_[i].name = name;
    return entries_[i];
  }
  entries_.push_back(fresh(local, name));
  return entries_.back();
}

const PlacedTensor* PlacementTable::find(const Tensor& local) const {
  const size_t i = index_of(local);
  return i < entries_.size() ? &entries_[i] : nullptr;
}

void PlacementTable::place(const Tensor& local, const std::string& dim, Placement p) {
  TD_CHECK_VALUE(has_dimension(dim), "PlacementTable: a placement along '", dim,
                 "', which no wrapper named (", str(), ")");
  PlacedTensor& e = record(local);
  for (auto& [d, q] : e.placements)
    TD_CHECK_VALUE(d != dim || std::holds_alternative<Replicate>(q), "PlacementTable: '", e.name,
                   "' is already ", to_string(q), " along '", dim, "'; cannot place it ",
                   to_string(p), " too");
  std::erase_if(e.placements, [&](const auto& dp) { return dp.first == dim; });
  e.placements.emplace_back(dim, p);
  note(e);
  // Remembered on the dimension, not read back from the entries: ZeRO drops the entries of
  // parameters a rank owns no piece of, and every rank must still agree to sum along it.
  if (divides_along(p))
    for (Dimension& d : dims_) d.divided = d.divided || d.name == dim;
}

void PlacementTable::cut(const Tensor& part, const Shape& whole, const std::string& dim,
                         std::shared_ptr<Communicator> group, Placement p) {
  add_dimension(dim, std::move(group));
  record(part).whole = whole;
  place(part, dim, p);
}

void PlacementTable::replace(const Tensor& local, const Tensor& part, const std::string& dim,
                             Placement p, bool keep) {
  PlacedTensor e = record(local);  // a copy: record() below may move the vector
  e.local = part;
  if (!keep) drop(local);
  const size_t i = index_of(part);
  if (i < entries_.size())
    entries_[i] = e;
  else
    entries_.push_back(e);
  place(part, dim, p);
}

void PlacementTable::drop(const Tensor& local) {
  const size_t i = index_of(local);
  if (i == entries_.size()) return;
  former_.emplace_back(local.impl_ptr(), entries_[i].name);
  entries_.erase(entries_.begin() + std::ptrdiff_t(i));
}

std::string PlacementTable::name_of(const Tensor& local) const {
  if (const PlacedTensor* e = find(local)) return e->name;
  for (const auto& [tensor, name] : former_)
    if (tensor.lock() == local.impl_ptr()) return name;
  return "";
}

void PlacementTable::keep_only(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<PlacedTensor> kept;
  for (const auto& [name, t] : tensors) {
    bool seen = false;  // a tied tensor listed twice is one entry
    for (const PlacedTensor& k : kept) seen = seen || k.local.is_same(t);
    if (seen) continue;
    const size_t i = index_of(t);
    kept.push_back(i < entries_.size() ? entries_[i] : fresh(t, name));
  }
  entries_ = std::move(kept);
}

void PlacementTable::follow(const std::vector<Tensor>& before, const std::vector<Tensor>& after) {
  TD_CHECK_VALUE(before.size() == after.size(), "PlacementTable::follow: ", before.size(),
                 " tensors before, ", after.size(), " after");
  for (size_t i = 0; i < before.size(); ++i) {
    const size_t k = index_of(before[i]);
    if (k >= entries_.size()) continue;
    entries_[k].local = after[i];
    if (!entries_[k].placements.empty()) note(entries_[k]);  // another table may meet it
  }
}

void PlacementTable::check_held(std::string_view by) const {
  for (const PlacedTensor& e : entries_)
    TD_CHECK_VALUE(e.local.impl_ptr().use_count() > 1, by, ": '", e.name,
                   "' of the placement table is no longer part of any model (its tensor is "
                   "held by the table alone)\n  hint: the model was moved after a wrapper "
                   "recorded its cuts; move it with parallel::move_to(model, device, table)");
}

void move_to(nn::Module& model, Device device, PlacementTable& table) {
  const std::vector<Tensor> before = model.parameters();
  model.to(device);
  table.follow(before, model.parameters());
}

std::vector<Tensor> PlacementTable::tensors() const {
  std::vector<Tensor> out;
  for (const PlacedTensor& e : entries_) out.push_back(e.local);
  return out;
}

bool PlacementTable::divides(const std::string& dim) const {
  for (const Dimension& d : dims_)
    if (d.name == dim) return d.across == Across::Stages || d.divided;
  return false;
}

std::vector<int64_t> PlacementTable::stage() const {
  std::vector<int64_t> out;
  for (const Dimension& d : dims_)
    if (d.across == Across::Stages) out.push_back(d.group->rank());
  return out;
}

std::vector<int64_t> PlacementTable::stage(const std::string& name) const {
  std::vector<int64_t> out;
  const auto own = stage_of_name_.find(name);
  for (const Dimension& d : dims_)
    if (d.across == Across::Stages)
      out.push_back(own != stage_of_name_.end() ? own->second : d.group->rank());
  return out;
}

std::string PlacementTable::str() const {
  std::string out;
  for (const Dimension& d : dims_)
    out += tandem::str(out.empty() ? "" : "; ", d.name, " (", d.group->size(), " ranks",
                       d.across == Across::Stages ? ", stages"
                       : d.divided                ? ", divides"
                                                  : "",
                       ")");
  return tandem::str(entries_.size(), " tensors", out.empty() ? "" : ", " + out);
}

}  // namespace tandem::parallel
