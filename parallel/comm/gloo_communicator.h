// parallel/comm/gloo_communicator.h — collectives over Gloo (Debian's libgloo-dev, TCP transport).
// Gloo's calls block, so each communicator runs them in order on one worker thread of its own
// (collective_queue.h): the caller gets a Work at once and goes on (DDP's backward keeps running
// while a bucket is reduced). CUDA tensors are copied to the host, reduced there and copied back.
// The ranks find each other through the store (gloo_rendezvous.h).
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <tandem/parallel/store/store.h>
#include <functional>
#include <memory>

namespace tandem::parallel {

struct GlooOptions {
  /// The address this rank's Gloo device listens on; empty: the local address that routes to
  /// `peer_hint` (127.0.0.1 when that is loopback).
  std::string hostname;
  std::string peer_hint = "127.0.0.1";  // usually MASTER_ADDR
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  /// Called after a collective fails, to name ranks known to have died (TCPStore knows).
  std::function<std::vector<int64_t>()> departed_ranks;
};

class GlooCommunicator : public Communicator {
 public:
  /// Connects the full mesh of `size` ranks through `store` (every rank calls this with the same
  /// store namespace). Throws DistributedError if a rank does not arrive within the timeout.
  GlooCommunicator(std::shared_ptr<Store> store, int rank, int size, GlooOptions options = {});
  ~GlooCommunicator() override;  // finishes queued collectives, then stops the worker

  std::string backend() const override { return "gloo"; }
  WorkPtr all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  WorkPtr broadcast(Tensor& tensor, int root = 0) override;
  WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input) override;
  WorkPtr reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum) override;
  WorkPtr all_to_all(Tensor& output, const Tensor& input) override;
  WorkPtr barrier() override;
  WorkPtr send(const Tensor& tensor, int dst) override;
  WorkPtr recv(Tensor& tensor, int src) override;

 protected:
  std::shared_ptr<Communicator> make_subgroup(const std::vector<int>& ranks, int index,
                                              const std::string& name) override;

 private:
  struct Impl;
  // Gives the call the next sequence number and queues `run` (which performs the collective
  // with that number as its Gloo tag) on the worker thread.
  WorkPtr enqueue(const std::string& op, const Tensor* t, const std::string& extra,
                  std::function<void(uint32_t tag)> run);

  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::parallel
