// parallel/comm/communicator.h — collectives over a group of ranks (PyTorch's ProcessGroup).
// Every call is asynchronous: it queues the collective and returns a Work handle; wait() blocks
// until it is done or throws. Every call gets the next sequence number, the same on every rank
// when all ranks call the same collectives in the same order, which they must; errors and
// timeouts quote it ("all_reduce #57"), so a hang or a mismatch can be located.
// Point-to-point messages (send, recv) are numbered per peer instead: the k-th send from rank a
// to rank b meets the k-th recv on b from a.
// Implementations: ThreadCommunicator (ranks that are threads of one process), ShmCommunicator
// (processes on one host, through shared memory), GlooCommunicator (CPU over TCP; CUDA tensors
// staged through the host) and NcclCommunicator (CUDA tensors on the communicator's device).
#pragma once

#include <tandem/core/reduce_op.h>
#include <tandem/core/tensor.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::parallel {

/// What a Work names, kept as values and formatted only when asked for (an error, a trace):
/// formatting takes about a microsecond, as long as a small collective over shared memory, and
/// these fields cost no allocation where a closure holding them did.
struct CollectiveInfo {
  std::string op;     // "all_reduce"
  uint64_t seq = 0;   // the sequence number (per peer for send/recv)
  std::string extra;  // "sum", "root 0", "to rank 1"
  bool has_tensor = false;
  int64_t numel = 0;
  DType dtype = kFloat32;
  uint64_t wire = 0;  // bytes on the wire; 0: not said
  int rank = 0, size = 1;
  /// "all_reduce #12 (sum, 1.05 MB on the wire, 262144 x float32 = 1.00 MiB) on rank 0 of 2".
  std::string text() const;
};

/// One collective in flight.
class Work {
 public:
  Work(CollectiveInfo info, std::chrono::milliseconds timeout);

  /// Blocks until the collective completes. Rethrows its DistributedError, or throws one naming
  /// the collective, its sequence number and the seconds waited after `timeout`.
  void wait(std::chrono::milliseconds timeout);
  void wait() { wait(timeout_); }
  bool is_completed() const { return done_.load(std::memory_order_acquire); }
  uint64_t sequence_number() const { return info_.seq; }
  /// e.g. "all_reduce #12 (sum, 1.05 MB on the wire, 262144 x float32 = 1.00 MiB) on rank 0 of 2".
  const std::string& description() const;

  /// For implementations: the collective finished (error: it failed). Only the first call
  /// counts (a watchdog may fail a Work whose transport call returns later).
  void mark_done(std::exception_ptr error = nullptr);
  /// Runs `f` at the start of every wait(): a rehearsal notes where its rank waits (and so what
  /// its compute overlaps), tools/plan/. Set before the Work is handed out.
  void on_wait(std::function<void()> f) { on_wait_ = std::move(f); }

 private:
  const CollectiveInfo info_;
  mutable std::once_flag described_;
  mutable std::string description_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Set (release) after error_: a Work completed before wait() (a collective run in the caller's
  // thread) is then read without the lock or the clock.
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  std::function<void()> on_wait_;
};

using WorkPtr = std::shared_ptr<Work>;

/// What one rank has put on the wire, per collective: calls, and bytes as the ring algorithms
/// count them (nccl-tests' "bus" bytes): all_reduce 2(n-1)/n of the tensor, reduce_scatter and
/// all_to_all (n-1)/n of the input, all_gather (n-1) times the input, broadcast and send the
/// tensor. The same rule for every backend, so runs, backends and DDP hooks compare.
struct CommStats {
  struct Entry {
    uint64_t calls = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, Entry> ops;
  uint64_t total_bytes() const;
  /// "all_reduce 120 calls 1.52 GB, broadcast 4 calls 3.1 MB".
  std::string str() const;
};

/// Bytes one rank puts on the wire for `op` on `bytes` of input among `n` ranks (CommStats'
/// rule above); 0 for barrier and recv.
uint64_t wire_bytes(const std::string& op, uint64_t bytes, int n);

class Communicator {
 public:
  Communicator(int rank, int size, std::chrono::milliseconds timeout);
  virtual ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  virtual std::string backend() const = 0;
  /// The collectives this rank has issued so far, and their bytes on the wire.
  CommStats stats() const;

  /// Reduces `tensor` (contiguous, the same shape on every rank) across ranks, in place.
  virtual WorkPtr all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) = 0;
  /// Reduces several tensors in place as one collective, as if they were concatenated
  /// (PyTorch's allreduce_coalesced): each contiguous, all of one dtype and device, the same
  /// list on every rank. DDP's buckets use it to skip packing the gradients into one buffer and
  /// copying the result back. Null (the default) where a backend has no such collective: the
  /// caller then packs the tensors into one for all_reduce.
  virtual WorkPtr all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::Sum);
  /// Copies `root`'s `tensor` into every other rank's `tensor`, in place.
  virtual WorkPtr broadcast(Tensor& tensor, int root = 0) = 0;
  /// outputs[i] receives rank i's `input` (outputs: size() tensors shaped like input).
  virtual WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input) = 0;
  /// `input` is size() equal chunks along dim 0; `output` (shaped like one chunk) receives the
  /// reduction, over ranks, of chunk rank().
  virtual WorkPtr reduce_scatter(Tensor& output, const Tensor& input,
                                 ReduceOp op = ReduceOp::Sum) = 0;
  /// A reduce-scatter of several tensors read as one array, as all_reduce_coalesced reads them,
  /// padded with zeros to size() chunks of output.numel(): `output` receives the reduction of
  /// chunk rank(). It may be that chunk itself where it lies in one input: the reduction then
  /// lands in place (NCCL's in-place reduce-scatter). ZeRO-2 reduces a bucket's gradients where
  /// they lie with it, ZeRO-1 its bucket buffer in place. The collective holds the inputs until
  /// it has read them, so a caller may let go of its own handles at once. Null (the default)
  /// where a backend has no such collective: the caller then packs them for reduce_scatter.
  virtual WorkPtr reduce_scatter_coalesced(Tensor& output, std::vector<Tensor>& inputs,
                                           ReduceOp op = ReduceOp::Sum);
  /// An all-gather in place over several tensors read as one array of size() chunks of `chunk`
  /// elements (the tail past their end is padding: sent as zeros, dropped on receipt): each
  /// rank's chunk reaches the same place in every other rank's tensors (NCCL's in-place
  /// all-gather). ZeRO gathers its updated pieces straight into the parameters with it. Null
  /// (the default) where a backend has none: the caller gathers into a buffer with all_gather.
  virtual WorkPtr all_gather_in_place(std::vector<Tensor>& tensors, int64_t chunk);
  /// `input` is size() equal chunks along dim 0, chunk j for rank j; `output` (shaped like
  /// input) receives, as its chunk i, rank i's chunk rank().
  virtual WorkPtr all_to_all(Tensor& output, const Tensor& input) = 0;
  /// The all-to-all of unequal parts (MPI_Alltoallv; torch's all_to_all_single with split
  /// sizes): `input`'s rows (dim 0) are cut into input_splits[i] rows for rank i, in rank order;
  /// `output` receives output_splits[j] rows from rank j, side by side in rank order; the other
  /// dims and the dtype alike. A rank's output_splits are what its peers send it (exchange them
  /// with all_to_all_splits). The default posts a message to every peer and receives one from
  /// each (parts of no rows are not sent), which a backend whose sends complete on their own runs
  /// as it is (threads, Gloo); shared memory, MPI and NCCL have their own. stats() count the bytes
  /// sent to the other ranks.
  virtual WorkPtr all_to_all_v(Tensor& output, const Tensor& input,
                               const std::vector<int64_t>& output_splits,
                               const std::vector<int64_t>& input_splits);
  /// Completes once every rank has called barrier().
  virtual WorkPtr barrier() = 0;
  /// Sends `tensor` to rank `dst`; the matching recv must expect the same shape and dtype.
  virtual WorkPtr send(const Tensor& tensor, int dst) = 0;
  /// Receives the next message from rank `src` into `tensor`.
  virtual WorkPtr recv(Tensor& tensor, int src) = 0;

  /// A group of some of this group's ranks (torch.distributed.new_group). Every rank of this
  /// group calls it, with the same ascending list, in the same order of calls; a rank in `ranks`
  /// gets a communicator over them (its rank there is its index in `ranks`), the others nullptr.
  /// The sub-group has this group's backend and timeout and numbers its collectives afresh.
  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks);

 protected:
  /// How much longer a Work waits than the transport's own timeout, for transports that wait
  /// for their peers themselves (shm, threads): theirs ends first, with the more precise error
  /// (who is missing).
  static constexpr std::chrono::milliseconds kWorkGrace{2000};
  /// Checks a tensor handed to a collective: contiguous, a supported dtype. `what` names the call.
  void check_tensor(const Tensor& t, const std::string& what) const;
  /// Checks a reduction handed to a collective: sum, mean, max or min (ValueError for argmax).
  void check_reduce_op(ReduceOp op, const std::string& what) const;
  /// The checks of each collective's arguments, the same for every backend (errors name it).
  void check_all_reduce(const Tensor& t, ReduceOp op) const;
  void check_all_reduce_coalesced(const std::vector<Tensor>& tensors, ReduceOp op) const;
  void check_broadcast(const Tensor& t, int root) const;
  void check_all_gather(const std::vector<Tensor>& outputs, const Tensor& input) const;
  void check_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) const;
  void check_reduce_scatter_coalesced(const Tensor& output, const std::vector<Tensor>& inputs,
                                      ReduceOp op) const;
  void check_all_gather_in_place(const std::vector<Tensor>& tensors, int64_t chunk) const;
  /// The checks of a list read as one array (the coalesced collectives): defined, contiguous,
  /// one dtype and device, no element in two tensors. Returns their elements in all.
  int64_t check_one_array(const std::vector<Tensor>& tensors, const std::string& what) const;
  /// A Work for collective `op` #seq on `t` (its input), counted in stats(): every backend makes
  /// its Works here.
  WorkPtr new_work(const std::string& op, uint64_t seq, const Tensor* t, const std::string& extra,
                   std::chrono::milliseconds timeout);
  /// The same for a collective over several tensors: `numel` elements of `dtype` in all.
  WorkPtr new_work(const std::string& op, uint64_t seq, int64_t numel, DType dtype,
                   const std::string& extra, std::chrono::milliseconds timeout);
  /// A Work for the n-th message to or from `peer`: "send #3 (to rank 1, …)".
  WorkPtr message_work(const std::string& op, uint64_t n, const Tensor& t, int peer);
  /// Checks all_to_all's tensors: same dtype and shape, dim 0 a multiple of size().
  void check_all_to_all(const Tensor& output, const Tensor& input) const;
  /// Checks all_to_all_v's arguments (a split per rank, none negative, summing to each tensor's
  /// rows, this rank's part of the same rows both ways, the other dims and dtype alike); returns
  /// the elements this rank sends to the others.
  int64_t check_all_to_all_v(const Tensor& output, const Tensor& input,
                             const std::vector<int64_t>& output_splits,
                             const std::vector<int64_t>& input_splits) const;
  /// Checks a point-to-point call's peer: another rank of the group.
  void check_peer(int peer, const std::string& what) const;
  /// "all_reduce #12 (sum, 262144 x float32 = 1.00 MiB) on rank 0 of 2" for errors.
  std::string describe(const std::string& op, uint64_t seq, const Tensor* t,
                       const std::string& extra = "") const;
  /// The same as values, formatted when asked (CollectiveInfo::text); `wire` bytes, if any, are
  /// added as "2.10 MB on the wire".
  CollectiveInfo info(const std::string& op, uint64_t seq, const Tensor* t,
                      const std::string& extra = "", uint64_t wire = 0) const;
  /// The backend's part of new_group, on every rank: `index` is this rank's place in `ranks`
  /// (−1: not a member, return nullptr unless the backend needs every rank), `name` unique to the
  /// call and the same on every rank. Default: a DistributedError naming the backend.
  virtual std::shared_ptr<Communicator> make_subgroup(const std::vector<int>& ranks, int index,
                                                      const std::string& name);

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;

 private:
  mutable std::mutex stats_mu_;
  CommStats stats_;
  uint64_t subgroups_ = 0;  // new_group calls so far: names the next one
};

/// What this rank receives from each rank in an all_to_all_v whose sends are `input_splits`
/// (rows for each rank): an all-to-all of the counts. Collective over `group`.
std::vector<int64_t> all_to_all_splits(Communicator& group,
                                       const std::vector<int64_t>& input_splits);

}  // namespace tandem::parallel
