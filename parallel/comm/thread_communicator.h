// parallel/comm/thread_communicator.h — a group whose ranks are threads of this process, one per
// device (cpu:N or cuda:N). Every collective is deterministic: reductions add the ranks' values
// in rank order, whatever order the threads arrive in, so every rank gets the same bits on every
// run. Because all ranks live in one process, a test sees each device's memory exactly, and a
// reader can step through a collective in a debugger.
//   parallel::spawn_threads([](std::shared_ptr<Communicator> group) {
//     const Device dev = Device::cpu(group->rank());
//     DistributedDataParallel ddp(model_on(dev), {.group = group});
//     ...
//   }, 2);
// Messages (send) are copied, so a send completes at once; a recv waits for its message. A call
// made while the rank's queue is idle runs in the rank's own thread (collective_queue.h).
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <tandem/parallel/comm/thread_world.h>
#include <functional>
#include <memory>

namespace tandem::parallel {

class CollectiveQueue;

struct ThreadGroupOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

class ThreadCommunicator : public Communicator {
 public:
  /// Rank `rank` of `world` (make_thread_group makes the world and every rank's communicator).
  ThreadCommunicator(std::shared_ptr<ThreadWorld> world, int rank);
  ~ThreadCommunicator() override;  // finishes queued collectives, then stops the worker

  std::string backend() const override { return "threads"; }
  WorkPtr all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  WorkPtr all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::Sum) override;
  WorkPtr broadcast(Tensor& tensor, int root = 0) override;
  WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input) override;
  WorkPtr reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum) override;
  WorkPtr reduce_scatter_coalesced(Tensor& output, std::vector<Tensor>& inputs,
                                   ReduceOp op = ReduceOp::Sum) override;
  WorkPtr all_gather_in_place(std::vector<Tensor>& tensors, int64_t chunk) override;
  WorkPtr all_to_all(Tensor& output, const Tensor& input) override;
  WorkPtr barrier() override;
  WorkPtr send(const Tensor& tensor, int dst) override;
  WorkPtr recv(Tensor& tensor, int src) override;

  ThreadWorld& world() { return *world_; }

 protected:
  std::shared_ptr<Communicator> make_subgroup(const std::vector<int>& ranks, int index,
                                              const std::string& name) override;

 private:
  // Numbers the collective and queues run(seq) on this rank's worker thread.
  WorkPtr enqueue(const std::string& op, const Tensor* t, const std::string& extra,
                  std::function<void(uint64_t seq, const std::string& description)> run);
  // All-reduce #seq of `t` on the worker: rank r reduces the r-th slice of every rank's tensor
  // in rank order, then every rank copies all slices (`call`: what the ranks must agree on).
  void run_all_reduce(Tensor& t, ReduceOp op, const std::string& call, uint64_t seq,
                      const std::string& d);

  std::shared_ptr<ThreadWorld> world_;
  std::unique_ptr<CollectiveQueue> queue_;
  std::mutex mu_;  // orders sequence numbers with the queue
  uint64_t next_seq_ = 0;
  std::vector<uint64_t> sent_, received_;  // per peer: the numbers of point-to-point messages
};

/// The `nranks` communicators of one new world (for callers that run their own threads).
std::vector<std::shared_ptr<Communicator>> make_thread_group(int nranks,
                                                             ThreadGroupOptions options = {});

/// Runs fn(group) on `nranks` threads, one per rank, and waits for them. If a rank throws, the
/// others' collectives fail at once (instead of waiting for it until the timeout), and
/// spawn_threads throws a DistributedError naming the first rank that failed and its error.
void spawn_threads(const std::function<void(std::shared_ptr<Communicator> group)>& fn, int nranks,
                   ThreadGroupOptions options = {});

}  // namespace tandem::parallel
