// parallel/comm/rehearsal_communicator.h — how the ranks of a rehearsal on the meta device meet
// (tools/plan/: a run's memory counted without computing it). A collective over meta tensors has
// no values to move, so it moves nothing, allocates nothing and is done at once, as torch's
// FakeProcessGroup is; a collective over host tensors (what ranks must agree on: a model's
// description, a pipeline message's shape header) goes to the communicator underneath (ranks
// that are threads), so the ranks still agree and a pipeline's receiver still learns each
// message's shape. Every call is counted in stats() as the real backend counts it: a rehearsal
// also says how many bytes each rank puts on the wire.
//
// Why not the thread communicator itself: it packs a copy of what some collectives send on the
// rank's device and lets a peer hold the rank's tensors until it leaves the collective, which on
// meta counts bytes that shared memory or NCCL keep in their own buffers (up to 16 % of a
// rank's peak, bench/RESULTS.md 2026-12-07 third).
#pragma once

#include <tandem/parallel/comm/communicator.h>

namespace tandem::parallel {

/// One meta collective or message of a rank, as a time model needs it (tools/plan/).
struct RehearsedCollective {
  std::string op;            // "all_reduce", "all_gather", "send", "recv", ...
  uint64_t bytes = 0;        // the tensor's (a coalesced call's tensors')
  uint64_t wire = 0;         // what this rank puts on the wire (CommStats' rule)
  std::vector<int> members;  // the group, by world rank, in group order
  int peer = -1;             // send/recv: the other rank, by world rank
};

/// Told every meta collective of a rank, and each wait on one, in the rank's order.
class RehearsalObserver {
 public:
  virtual ~RehearsalObserver() = default;
  /// Returns an id for waited().
  virtual uint64_t issued(const RehearsedCollective& c) = 0;
  virtual void waited(uint64_t id) = 0;
};

class RehearsalCommunicator : public Communicator {
 public:
  /// Over `inner` (a thread rank), whose rank, size and timeout it takes.
  explicit RehearsalCommunicator(std::shared_ptr<Communicator> inner);

  std::string backend() const override { return "rehearsal over " + inner_->backend(); }
  WorkPtr all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  WorkPtr all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::Sum) override;
  WorkPtr broadcast(Tensor& tensor, int root = 0) override;
  WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input) override;
  WorkPtr reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum) override;
  WorkPtr reduce_scatter_coalesced(Tensor& output, std::vector<Tensor>& inputs,
                                   ReduceOp op = ReduceOp::Sum) override;
  WorkPtr all_gather_in_place(std::vector<Tensor>& tensors, int64_t chunk) override;
  WorkPtr all_to_all(Tensor& output, const Tensor& input) override;
  WorkPtr all_to_all_v(Tensor& output, const Tensor& input,
                       const std::vector<int64_t>& output_splits,
                       const std::vector<int64_t>& input_splits) override;
  WorkPtr barrier() override;
  WorkPtr send(const Tensor& tensor, int dst) override;
  WorkPtr recv(Tensor& tensor, int src) override;

  /// Tells `observer` this group's meta collectives, and those of the sub-groups made from it
  /// afterwards (a mesh's); nullptr stops. Set it before the rank's first collective.
  void observe(std::shared_ptr<RehearsalObserver> observer) { observer_ = std::move(observer); }

  /// What this rank has put on the wire through this group and every sub-group made from it
  /// (a mesh's groups), by collective.
  CommStats wire() const;

 protected:
  std::shared_ptr<Communicator> make_subgroup(const std::vector<int>& ranks, int index,
                                              const std::string& name) override;

 private:
  // A meta collective: counted, done.
  WorkPtr done(const std::string& op, const Tensor* t, const std::string& extra = "");
  WorkPtr done(const std::string& op, int64_t numel, DType dtype, const std::string& extra);

  // Tells the observer, if any, and hooks the Work's waits.
  WorkPtr told(WorkPtr w, const std::string& op, uint64_t bytes, int peer = -1);

  std::shared_ptr<Communicator> inner_;
  std::vector<int> members_;  // this group's ranks in the world
  std::shared_ptr<RehearsalObserver> observer_;
  mutable std::mutex children_mu_;
  std::vector<std::shared_ptr<RehearsalCommunicator>> children_;  // sub-groups, for wire()
  uint64_t next_seq_ = 0;
  std::vector<uint64_t> sent_, received_;  // per peer: meta messages so far
};

}  // namespace tandem::parallel
