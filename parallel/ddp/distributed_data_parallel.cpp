// parallel/ddp/distributed_data_parallel.cpp — construction: every rank must hold the same model
// (names, shapes, dtypes), checked by gathering each rank's description; then rank 0's
// parameters and buffers are broadcast, the buckets planned and one post-accumulate hook
// registered per parameter.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/parallel/ddp/bucket_plan.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/process_group.h>
#include <sstream>

namespace tandem::parallel {
namespace {

// "name [shape] dtype" per line, for comparing ranks' models.
std::string describe_model(const nn::StateDict& params) {
  std::ostringstream os;
  for (const auto& [name, p] : params) os << name << " " << p.shape() << " " << p.dtype() << "\n";
  return os.str();
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Every rank's description, through two all_gathers (lengths, then padded bytes).
std::vector<std::string> gather_strings(Communicator& comm, const std::string& mine) {
  std::vector<Tensor> lens;
  for (int r = 0; r < comm.size(); ++r) lens.push_back(zeros({1}, {.dtype = kInt64}));
  comm.all_gather(lens, full({1}, double(mine.size()), {.dtype = kInt64}))->wait();
  int64_t longest = 0;
  for (const Tensor& l : lens) longest = std::max(longest, l.data<int64_t>()[0]);
  Tensor bytes = zeros({std::max<int64_t>(longest, 1)}, {.dtype = kInt64});
  for (size_t i = 0; i < mine.size(); ++i) bytes.data<int64_t>()[i] = (unsigned char)mine[i];
  std::vector<Tensor> all;
  for (int r = 0; r < comm.size(); ++r) all.push_back(zeros(bytes.shape(), {.dtype = kInt64}));
  comm.all_gather(all, bytes)->wait();
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r) {
    std::string s(size_t(lens[size_t(r)].data<int64_t>()[0]), ' ');
    for (size_t i = 0; i < s.size(); ++i) s[i] = char(all[size_t(r)].data<int64_t>()[i]);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

DistributedDataParallelBase::DistributedDataParallelBase(nn::Module& module, DDPOptions options)
    : options_(std::move(options)) {
  group_ = options_.group;
  if (!group_) {
    TD_CHECK_AS(DistributedError, is_initialized(),
                "DistributedDataParallel: no process group\n  hint: call "
                "parallel::init_process_group() first (under `tandem launch`), or pass .group");
    group_ = std::shared_ptr<Communicator>(&default_group(), [](Communicator*) {});
  }
  nn::StateDict named;
  for (auto& [name, p] : module.named_parameters())
    if (p.requires_grad()) named.emplace_back(name, p);
  TD_CHECK_VALUE(!named.empty(),
                 "DistributedDataParallel: the module has no parameter that "
                 "requires grad");

  // 1. The same model everywhere, or an error that says what differs (on every rank alike).
  const std::vector<std::string> models = gather_strings(*group_, describe_model(named));
  for (int r = 1; r < group_->size(); ++r) {
    if (models[size_t(r)] == models[0]) continue;
    const auto a = lines(models[0]), b = lines(models[size_t(r)]);
    std::string diff;
    for (size_t i = 0; i < std::max(a.size(), b.size()) && diff.size() < 600; ++i) {
      const std::string x = i < a.size() ? a[i] : "(nothing)",
                        y = i < b.size() ? b[i] : "(nothing)";
      if (x != y) diff += str("\n  parameter ", i, ": rank 0 has ", x, ", rank ", r, " has ", y);
    }
    ::tandem::detail::fail<DistributedError>(
        "DistributedDataParallel: rank ", r, "'s model differs from rank 0's (", a.size(), " vs ",
        b.size(), " parameters):", diff,
        "\n  hint: every rank must build the same model, in the same order");
  }

  // 2. Rank 0's values everywhere: parameters initialised with different seeds become equal.
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : named) group_->broadcast(p, 0)->wait();
  }
  for (auto& [name, b] : module.named_buffers()) buffers_.push_back(b);
  broadcast_buffers();

  // 3. Buckets and hooks.
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (auto& [name, p] : named) {
    params.push_back(p);
    names.push_back(name);
  }
  auto plan =
      plan_buckets(params, {.bucket_cap_bytes = size_t(options_.bucket_cap_mb * (1 << 20)),
                            .first_bucket_bytes = size_t(options_.first_bucket_mb * (1 << 20))});
  if (options_.zero_stage != 0) {
    TD_CHECK_VALUE(!options_.comm_hook, "DistributedDataParallel: zero_stage ", options_.zero_stage,
                   " reduces with a reduce-scatter; a comm_hook ('", options_.comm_hook->name(),
                   "') replaces an all-reduce\n  hint: use one or the "
                   "other");
    zero_ = std::make_shared<ZeroShards>(options_.zero_stage, params, names, plan, group_);
  }
  record_placements(names, params);
  reducer_ = std::make_shared<Reducer>(params, names, std::move(plan), group_,
                                       options_.find_unused_parameters, options_.comm_hook, zero_,
                                       options_.gradient_as_bucket_view && !zero_);
  for (size_t i = 0; i < params.size(); ++i) {
    std::weak_ptr<Reducer> weak = reducer_;
    hooks_.push_back(params[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto r = weak.lock()) r->mark_ready(i);
    }));
  }
}

DistributedDataParallelBase::~DistributedDataParallelBase() {
  for (HookHandle& h : hooks_) h.remove();
}

void DistributedDataParallelBase::record_placements(const std::vector<std::string>& names,
                                                    const std::vector<Tensor>& params) {
  if (!options_.placements) options_.placements = std::make_shared<PlacementTable>();
  PlacementTable& table = *options_.placements;
  table.add_dimension(options_.mesh_dim, group_);
  for (size_t i = 0; i < params.size(); ++i) {
    table.record(params[i], names[i]);
    if (!zero_) continue;
    const int piece = zero_->piece_of(i);
    if (piece < 0) {
      table.drop(params[i]);
      continue;
    }
    const ZeroShards::Piece& p = zero_->piece_list()[size_t(piece)];
    table.replace(params[i], p.view, options_.mesh_dim, Piece{.begin = p.lo, .length = p.len});
  }
}

std::shared_ptr<ZeroShards> DistributedDataParallelBase::zero_shards() const {
  TD_CHECK_VALUE(zero_ != nullptr,
                 "DistributedDataParallel: zero_stage is 0, so nothing is "
                 "sharded\n  hint: construct it with .zero_stage = 1 or 2 for a zero_optimizer");
  return zero_;
}

void DistributedDataParallelBase::before_forward() {
  reducer_->recover_from_failed_backward();
  if (options_.broadcast_buffers) broadcast_buffers();
}

void DistributedDataParallelBase::broadcast_buffers() {
  // All queued at once, then waited for: one round trip of latency, not one per buffer.
  NoGradGuard no_grad;
  std::vector<WorkPtr> works;
  for (Tensor& b : buffers_) works.push_back(group_->broadcast(b, 0));
  for (auto& w : works) w->wait();
}

}  // namespace tandem::parallel
