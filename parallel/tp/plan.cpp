// parallel/tp/plan.cpp — a walk over the model's slots with their dotted names, putting each named
// layer's tensor-parallel layer in its place.
#include <tandem/core/check.h>
#include <tandem/nn/gpt.h>
#include <tandem/parallel/tp/layers.h>
#include <tandem/parallel/tp/plan.h>
#include <tandem/parallel/tp/vocab_parallel.h>
#include <map>

namespace tandem::parallel::tp {
namespace {

// After a ScatterSequence item: each rank keeps its T/t positions of the whole [B, T, C] every
// rank computed (backward: the positions' gradients all-gathered).
struct SequenceScatter : nn::Module {
  Group group;
  explicit SequenceScatter(Group g) : group(std::move(g)) {}
  Tensor forward(const Tensor& x) const { return scatter_to_sequence_parallel_region(x, group); }
  void visit(nn::Visitor&) override {}
};

// Whether the dotted name `full` is `entry` or ends with "." + entry.
bool names(const std::string& full, const std::string& entry) {
  return full == entry || (full.size() > entry.size() && full.ends_with(entry) &&
                           full[full.size() - entry.size() - 1] == '.');
}

class Applier : public nn::Visitor {
 public:
  Applier(const Group& group, const Plan& plan, const TensorParallelOptions& options)
      : group_(group), plan_(plan), options_(options), used_(plan.size(), false) {}

  void operator()(std::string_view, Tensor&) override {}
  void buffer(std::string_view, Tensor&) override {}
  void operator()(std::string_view name, nn::Module& child) override {
    const std::string full = join(name);
    if (const LayerPlan* e = entry_for(full, {Cut::OwnStream})) own_stream(child, *e, full);
    descend(full, child);
  }
  void slot(std::string_view name, nn::AnyModule& child) override {
    const std::string full = join(name);
    if (const LayerPlan* e =
            entry_for(full, {Cut::Column, Cut::Row, Cut::VocabRows, Cut::VocabHead})) {
      child = cut(child, *e, full);
      return;
    }
    (*this)(name, child.get());
  }

  // Entries that matched no layer: a plan written for another model.
  void check_all_used(const nn::Sequential& model) const {
    for (size_t i = 0; i < plan_.size(); ++i)
      TD_CHECK_VALUE(used_[i] || plan_[i].cut == Cut::ScatterSequence ||
                         (plan_[i].under_sequence_parallel && !options_.sequence_parallel),
                     "tensor parallel plan: the entry \"", plan_[i].name,
                     "\" names no layer of the model (its items: ", item_names(model), ")");
  }

 private:
  std::string join(std::string_view name) const {
    if (name.empty()) return prefix_;
    return prefix_.empty() ? std::string(name) : prefix_ + "." + std::string(name);
  }
  void descend(const std::string& full, nn::Module& child) {
    const std::string saved = prefix_;
    prefix_ = full;
    child.visit(*this);
    prefix_ = saved;
  }
  static std::string item_names(const nn::Sequential& model) {
    std::string out;
    for (const nn::NamedModule& item : model.items()) out += (out.empty() ? "" : ", ") + item.name;
    return out;
  }

  const LayerPlan* entry_for(const std::string& full, std::initializer_list<Cut> cuts) {
    for (size_t i = 0; i < plan_.size(); ++i) {
      const LayerPlan& e = plan_[i];
      if (std::find(cuts.begin(), cuts.end(), e.cut) == cuts.end() || !names(full, e.name))
        continue;
      if (e.under_sequence_parallel && !options_.sequence_parallel) continue;
      used_[i] = true;
      return &e;
    }
    return nullptr;
  }

  template <typename M>
  M& as(nn::AnyModule& child, const LayerPlan& e, const std::string& full, const char* type) {
    M* m = dynamic_cast<M*>(&child.get());
    TD_CHECK_VALUE(m != nullptr, "tensor parallel plan: \"", e.name, "\" names ", full, ", a ",
                   child.get().type_name(), "; its cut takes ", type);
    return *m;
  }

  nn::AnyModule cut(nn::AnyModule& child, const LayerPlan& e, const std::string& full) {
    PlacementTable* table = options_.placements.get();
    const bool sp = options_.sequence_parallel;
    switch (e.cut) {
      case Cut::Column:
        return ColumnParallelLinear(
            as<nn::Linear>(child, e, full, "a Linear"), group_,
            {.stride = e.stride, .sequence_parallel = sp, .placements = table});
      case Cut::Row:
        return RowParallelLinear(as<nn::Linear>(child, e, full, "a Linear"), group_,
                                 {.sequence_parallel = sp, .placements = table});
      case Cut::VocabRows: {
        const nn::Embedding& whole = as<nn::Embedding>(child, e, full, "an Embedding");
        VocabParallelEmbedding rows(whole, group_, table);
        tables_[&whole.weight.impl()] = {rows.weight, rows.vocab_start};
        return rows;
      }
      case Cut::VocabHead: {
        const nn::LMHead& head = as<nn::LMHead>(child, e, full, "an LMHead");
        const auto it = tables_.find(&head.weight.impl());
        TD_CHECK_VALUE(it != tables_.end(), "tensor parallel plan: \"", e.name, "\" (", full,
                       ") reads the rows of the table it is tied to, and no VocabRows entry cut "
                       "that table before it");
        // The tie kept: the head's weight is this rank's rows of the table, the same tensor.
        return VocabParallelHead(it->second.first, group_, it->second.second, head.vocab_size, sp);
      }
      default:
        break;
    }
    TD_CHECK_VALUE(false, "tensor parallel plan: no cut for \"", e.name, "\"");
    return child;  // unreachable
  }

  void own_stream(nn::Module& child, const LayerPlan& e, const std::string& full) {
    if (auto* d = dynamic_cast<nn::Dropout*>(&child)) {
      d->generator = options_.rank_stream;
    } else if (auto* a = dynamic_cast<nn::CausalSelfAttention*>(&child)) {
      a->generator = options_.rank_stream;
    } else {
      TD_CHECK_VALUE(false, "tensor parallel plan: \"", e.name, "\" names ", full, ", a ",
                     child.type_name(), "; OwnStream takes a Dropout or a CausalSelfAttention");
    }
  }

  Group group_;
  const Plan& plan_;
  const TensorParallelOptions& options_;
  std::vector<bool> used_;
  std::string prefix_;
  // Each VocabRows table cut so far: the whole's tensor -> (this rank's rows, its first id).
  std::map<const TensorImpl*, std::pair<Tensor, int64_t>> tables_;
};

// The first parameter's device (the CPU for a model without any).
Device device_of(nn::Sequential& model) {
  for (const Tensor& p : model.parameters()) return p.device();
  return Device::cpu();
}

}  // namespace

std::shared_ptr<Generator> rank_stream(const Group& group, Device device) {
  TD_CHECK_VALUE(group != nullptr, "tp::rank_stream: no tensor-parallel group");
  const uint64_t seed = default_generator(device).get_state().seed;
  return std::make_shared<Generator>(seed + 2718 + uint64_t(group->rank()));
}

nn::Sequential parallelize(const nn::Sequential& model, const Group& group, const Plan& plan,
                           TensorParallelOptions options) {
  TD_CHECK_VALUE(group != nullptr, "tensor parallel plan: no tensor-parallel group");
  // Always recorded: a wrapper given no table adopts these cuts (placement.h).
  if (!options.placements) options.placements = std::make_shared<PlacementTable>();
  nn::Sequential out = nn::clone(model);  // every rank cuts its own copy (the tie kept)
  if (!options.rank_stream) options.rank_stream = rank_stream(group, device_of(out));
  Applier applier(group, plan, options);
  out.visit(applier);
  applier.check_all_used(model);

  // Sequence parallelism: each rank keeps its positions after the items the plan names; the
  // replicated parameters after that point see T/t positions, their gradients partial.
  nn::Sequential cut;
  bool scattered = true;  // a plan without a ScatterSequence item starts split (a lone block)
  for (const LayerPlan& e : plan) scattered = scattered && e.cut != Cut::ScatterSequence;
  std::vector<Tensor> partial;
  for (const nn::NamedModule& item : out.items()) {
    cut.push_back(item.name, item.module);
    if (!options.sequence_parallel) continue;
    if (scattered)
      for (const Tensor& p : item.module->parameters()) partial.push_back(p);
    for (const LayerPlan& e : plan)
      if (e.cut == Cut::ScatterSequence && e.name == item.name) {
        cut.push_back(item.name + ".scatter_sequence", SequenceScatter(group));
        scattered = true;
      }
  }
  options.placements->add_dimension(kDimension, group);
  for (const auto& named : cut.named_parameters()) {
    const Tensor& p = named.second;
    const PlacedTensor& e = options.placements->record(p, named.first);
    const bool after_scatter =
        std::any_of(partial.begin(), partial.end(), [&](const Tensor& q) { return q.is_same(p); });
    if (after_scatter && std::holds_alternative<Replicate>(e.along(kDimension)))
      options.placements->place(p, kDimension, Partial{});
  }
  return cut;
}

}  // namespace tandem::parallel::tp
