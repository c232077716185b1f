// parallel/ddp/distributed_data_parallel.h — data parallelism across processes, one per device
// (torch.nn.parallel.DistributedDataParallel):
//   parallel::init_process_group();
//   Net net;  net.to(parallel::local_device());
//   parallel::DistributedDataParallel ddp(net);       // checks shapes, copies rank 0's weights
//   optim::SGD opt(net.parameters(), {.lr = 0.1});
//   auto loss = nn::cross_entropy(ddp(x), y);           // x: this rank's share of the batch
//   loss.backward();                                    // gradients arrive averaged over ranks
//   opt.step();
// Where things happen: bucket_plan.cpp (which gradients travel together), reducer.cpp (hooks,
// in-order asynchronous all-reduce, write-back), distributed_data_parallel.cpp (construction
// checks, broadcasts, hooks registration).
#pragma once

#include <tandem/nn/module.h>
#include <tandem/parallel/comm/communicator.h>
#include <tandem/parallel/ddp/comm_hook.h>
#include <tandem/parallel/ddp/reducer.h>
#include <tandem/parallel/ddp/zero_shards.h>
#include <tandem/parallel/placement.h>
#include <memory>
#include <utility>

namespace tandem::parallel {

struct DDPOptions {
  std::shared_ptr<Communicator> group;  // null: the default process group
  double bucket_cap_mb = 25;            // bucket size cap (MiB)
  double first_bucket_mb = 1;           // the first bucket's cap (MiB)
  bool broadcast_buffers = true;  // copy rank 0's buffers (batch-norm statistics) each forward
  bool find_unused_parameters = false;  // allow parameters that get no gradient (slower)
  /// What a bucket sends (comm_hook.h): null is allreduce_hook(), an average during backward.
  std::shared_ptr<CommHook> comm_hook;
  /// ZeRO (zero_shards.h): 0 keeps everything on every rank; 1 shards the optimizer state, 2 the
  /// gradients too. Train with a zero_optimizer<>() (zero_optimizer.h).
  int zero_stage = 0;
  /// Each parameter's .grad becomes a view of its slice of the bucket (PyTorch's option of the
  /// name): the gradients are held once, not twice (16 bytes a parameter with Adam in float32
  /// instead of 20), and the averages need no copy back. Off by default, as in PyTorch: .grad then
  /// aliases DDP's buffer, which the next backward overwrites.
  bool gradient_as_bucket_view = false;
  /// The table (placement.h) the parameters are recorded in: Replicate along `mesh_dim`, or
  /// under ZeRO each of this rank's pieces as a Piece of its parameter (and the parameters it
  /// owns none of dropped: their gradients are not here). Null: a table of its own.
  std::shared_ptr<PlacementTable> placements;
  std::string mesh_dim = "dp";
};

/// The part of DDP that does not depend on the module's type.
class DistributedDataParallelBase {
 public:
  DistributedDataParallelBase(nn::Module& module, DDPOptions options);
  /// Takes its hooks off the parameters (PyTorch's ~Reducer does the same): the module trains on
  /// alone, or under another wrapper, as if this one had never been.
  ~DistributedDataParallelBase();
  DistributedDataParallelBase(const DistributedDataParallelBase&) = delete;
  DistributedDataParallelBase& operator=(const DistributedDataParallelBase&) = delete;

  /// Turns gradient synchronisation off for the scope (gradient accumulation): backward passes
  /// inside only accumulate locally; the first backward after it all-reduces the sum.
  class NoSync {
   public:
    explicit NoSync(Reducer& r) : r_(&r) { r.set_sync(false); }
    ~NoSync() { r_->set_sync(true); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    Reducer* r_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*reducer_); }
  /// Reduces now the gradients that backward passes under no_sync() accumulated (averaged over
  /// the group; ZeRO: reduce-scattered into this rank's pieces), as the next backward would have.
  /// For passes the caller cannot wrap one by one: a pipeline stage's micro-batches, run inside
  /// no_sync(), then reduced once (Megatron's finish_grad_sync). Collective.
  void reduce_gradients() { reducer_->reduce_accumulated(); }

  Communicator& group() { return *group_; }
  const Reducer& reducer() const { return *reducer_; }
  /// This rank's shards (zero_stage 1 or 2); ValueError under plain DDP.
  std::shared_ptr<ZeroShards> zero_shards() const;
  /// What this rank trains and how it lies in the whole model: what parallel::clip_grad_norm_
  /// reads.
  const std::shared_ptr<PlacementTable>& placements() const { return options_.placements; }

 protected:
  /// Runs before every forward: rank 0's buffers to everyone (when broadcast_buffers).
  void before_forward();

 private:
  void broadcast_buffers();
  // The parameters' records, or ZeRO's pieces' (every rank owns one piece at least: ZeroShards
  // checks it, so every rank records the dimension as divided).
  void record_placements(const std::vector<std::string>& names, const std::vector<Tensor>& params);

  DDPOptions options_;
  // The module's buffers (batch-norm statistics), gathered once: named_buffers() builds every
  // dotted name, too much for each forward. Tensors are handles, so updates in place are seen.
  std::vector<Tensor> buffers_;
  std::shared_ptr<Communicator> group_;
  std::shared_ptr<ZeroShards> zero_;  // null: plain DDP
  std::shared_ptr<Reducer> reducer_;  // the hooks hold it weakly: no dangling after destruction
  std::vector<HookHandle> hooks_;     // one post-accumulate hook per parameter
};

/// Wraps `module` (which must outlive the wrapper); forward()/operator() call module.forward.
template <typename M>
class DistributedDataParallel : public DistributedDataParallelBase {
 public:
  explicit DistributedDataParallel(M& module, DDPOptions options = {})
      : DistributedDataParallelBase(module, std::move(options)), module_(&module) {}

  template <typename... Args>
  decltype(auto) forward(Args&&... args) {
    before_forward();
    return module_->forward(std::forward<Args>(args)...);
  }
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }
  M& module() { return *module_; }

 private:
  M* module_;
};

}  // namespace tandem::parallel
