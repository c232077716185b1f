// parallel/ddp/zero_optimizer.cpp — step = the inner optimizer on this rank's pieces, then the
// all-gather that gives every rank the whole updated model again; and the state dict as one
// optimizer over the whole model would write it, so that a checkpoint does not depend on the
// number of ranks that wrote it (PyTorch's ZeroRedundancyOptimizer.consolidate_state_dict).
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/parallel/comm/broadcast_object.h>
#include <tandem/parallel/ddp/zero_optimizer.h>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tandem::parallel {

ZeroOptimizer::ZeroOptimizer(std::shared_ptr<ZeroShards> shards,
                             std::unique_ptr<optim::Optimizer> inner,
                             const std::vector<std::vector<Tensor>>& groups)
    : shards_(std::move(shards)), inner_(std::move(inner)) {
  TD_CHECK_VALUE(shards_ && inner_, "ZeroOptimizer: needs the DDP's shards and an optimizer");
  int next = 0;
  for (const auto& g : groups) {
    group_sizes_.push_back(g.size());
    for (const Tensor& p : g) {
      full_.push_back(p);
      param_index_.push_back(shards_->index_of(p));
      inner_index_.push_back(shards_->piece_of(param_index_.back()) >= 0 ? next++ : -1);
    }
  }
}

void ZeroOptimizer::step() {
  ++steps_;
  inner_->step();
  shards_->gather_parameters();
}

void ZeroOptimizer::zero_grad() {
  inner_->zero_grad();
  for (const Tensor& p : full_) p.set_grad(Tensor());
}

namespace {

// The groups' JSON with each group's "params" replaced by `indices[g]`.
std::string regroup(const std::string& json, const std::vector<std::vector<size_t>>& indices) {
  nlohmann::json groups = nlohmann::json::parse(json);
  TD_CHECK_VALUE(groups.is_array() && groups.size() == indices.size(), "ZeroOptimizer: the state ",
                 "dict has ", groups.size(), " parameter groups, the optimizer ", indices.size());
  for (size_t g = 0; g < indices.size(); ++g) groups[g]["params"] = indices[g];
  return groups.dump();
}

}  // namespace

std::string ZeroOptimizer::param_groups_json() const {
  std::vector<std::vector<size_t>> indices;  // group g: the next group_sizes_[g] of full_
  size_t j = 0;
  for (size_t size : group_sizes_) {
    indices.emplace_back();
    for (size_t k = 0; k < size; ++k) indices.back().push_back(j++);
  }
  return regroup(inner_->state_dict().param_groups_json, indices);
}

optim::OptimizerState ZeroOptimizer::state_dict() const {
  TD_CHECK_VALUE(consolidated_at_ == steps_,
                 "ZeroOptimizer: state_dict() before consolidate_state_dict(): each rank holds "
                 "only its shard\n  hint: call consolidate_state_dict() on every rank first");
  return consolidated_;
}

const optim::OptimizerState& ZeroOptimizer::consolidate_state_dict() {
  NoGradGuard no_grad;
  Communicator& group = shards_->group();
  const optim::OptimizerState mine = inner_->state_dict();
  // This rank's state by piece: name -> tensor ([len], or a scalar such as Adam's step).
  const auto& pieces = shards_->piece_list();
  std::vector<std::map<std::string, Tensor>> state(pieces.size());
  std::vector<int> piece_at(pieces.size(), -1);  // inner index -> index into pieces
  for (size_t j = 0; j < full_.size(); ++j)
    if (inner_index_[j] >= 0)
      piece_at[size_t(inner_index_[j])] = shards_->piece_of(param_index_[j]);
  // The state's names, in the inner optimizer's order (Adam: step, exp_avg, exp_avg_sq), and
  // whether each is a scalar.
  std::vector<std::pair<std::string, bool>> names;
  auto note = [&](const std::string& name, bool scalar) {
    for (const auto& [n, s] : names)
      if (n == name) return;
    names.emplace_back(name, scalar);
  };
  for (const auto& [key, t] : mine.tensors) {
    size_t i;
    std::string name;
    if (!optim::parse_state_key(key, i, name)) continue;
    state[size_t(piece_at[i])][name] = t;
    note(name, t.dim() == 0);
  }
  // Every rank's names (a rank whose pieces never stepped has none).
  std::ostringstream os;
  for (const auto& [name, scalar] : names) os << name << (scalar ? " s\n" : " v\n");
  const std::string listed = os.str();
  for (int r = 0; r < group.size(); ++r) {
    std::istringstream in(broadcast_string(group, listed, r));
    for (std::string name, kind; in >> name >> kind;) note(name, kind == "s");
  }
  // Per parameter: whether any rank holds its state, and each scalar's value (the same on every
  // rank that owns a piece of it; a max over the ranks picks it up).
  const size_t n = shards_->parameters().size();
  const Device dev = shards_->parameters().front().device();
  Tensor has = zeros({int64_t(n)}, {.dtype = kFloat64, .device = dev});
  std::map<std::string, Tensor> scalars;
  for (const auto& [name, scalar] : names)
    if (scalar) scalars[name] = zeros({int64_t(n)}, {.dtype = kFloat64, .device = dev});
  {
    Tensor h = zeros({int64_t(n)}, {.dtype = kFloat64});
    std::map<std::string, Tensor> v;
    for (auto& [name, t] : scalars) v[name] = zeros({int64_t(n)}, {.dtype = kFloat64});
    for (size_t k = 0; k < pieces.size(); ++k) {
      if (state[k].empty()) continue;
      h.data<double>()[pieces[k].param] = 1;
      for (auto& [name, t] : v)
        if (state[k].count(name)) t.data<double>()[pieces[k].param] = state[k][name].item();
    }
    has.copy_(h);
    group.all_reduce(has, ReduceOp::Max)->wait();
    for (auto& [name, t] : scalars) {
      t.copy_(v[name]);
      group.all_reduce(t, ReduceOp::Max)->wait();
    }
  }
  const Tensor has_host = has.to(Device::cpu());
  for (auto& [name, t] : scalars) t = t.to(Device::cpu());  // read below, once per parameter
  // Whole tensors, a bucket and a name at a time.
  std::vector<std::map<std::string, Tensor>> whole(n);  // module parameter -> name -> tensor
  for (size_t b = 0; b < shards_->bucket_count(); ++b) {
    for (const auto& [name, scalar] : names) {
      if (scalar) continue;
      std::vector<Tensor> values(pieces.size());
      for (size_t k = 0; k < pieces.size(); ++k)
        if (state[k].count(name)) values[k] = state[k][name].reshape({pieces[k].len});
      const Tensor flat = shards_->all_gather_bucket(b, values);
      for (size_t i : shards_->bucket(b)) {
        const Tensor& p = shards_->parameters()[i];
        whole[i][name] = flat.narrow(0, shards_->offset(i), p.numel()).reshape(p.shape());
      }
    }
  }
  optim::OptimizerState out;
  size_t j = 0;
  for (size_t size : group_sizes_) {
    for (size_t k = 0; k < size; ++k, ++j) {
      const size_t i = param_index_[j];
      if (has_host.data<double>()[i] == 0) continue;
      for (const auto& [name, scalar] : names) {
        const std::string key = "state." + std::to_string(j) + "." + name;
        if (scalar)
          out.tensors.emplace_back(key, scalar_tensor(scalars[name].data<double>()[i]));
        else
          out.tensors.emplace_back(key, whole[i][name]);
      }
    }
  }
  out.param_groups_json = param_groups_json();
  consolidated_ = std::move(out);
  consolidated_at_ = steps_;
  return consolidated_;
}

void ZeroOptimizer::load_state_dict(const optim::OptimizerState& state) {
  optim::OptimizerState mine;
  for (const auto& [key, t] : state.tensors) {
    size_t j;
    std::string name;
    if (!optim::parse_state_key(key, j, name)) continue;
    TD_CHECK_VALUE(j < full_.size(), "ZeroOptimizer: state dict key '", key, "' names parameter ",
                   j, ", but the optimizer has ", full_.size());
    if (inner_index_[j] < 0) continue;  // another rank's
    const std::string mine_key = "state." + std::to_string(inner_index_[j]) + "." + name;
    if (t.dim() == 0) {
      mine.tensors.emplace_back(mine_key, t);
      continue;
    }
    TD_CHECK_VALUE(t.numel() == full_[j].numel(), "ZeroOptimizer: state dict key '", key,
                   "' has shape ", t.shape(), ", its parameter ", full_[j].shape());
    const auto& piece = shards_->piece_list()[size_t(shards_->piece_of(param_index_[j]))];
    mine.tensors.emplace_back(mine_key,
                              t.reshape({t.numel()}).narrow(0, piece.lo, piece.len).contiguous());
  }
  std::vector<std::vector<size_t>> indices;
  size_t j = 0;
  for (size_t size : group_sizes_) {
    indices.emplace_back();
    for (size_t k = 0; k < size; ++k, ++j)
      if (inner_index_[j] >= 0) indices.back().push_back(size_t(inner_index_[j]));
  }
  mine.param_groups_json = regroup(state.param_groups_json, indices);
  inner_->load_state_dict(mine);
}

}  // namespace tandem::parallel
