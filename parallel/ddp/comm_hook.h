// parallel/ddp/comm_hook.h — what DDP sends for a bucket of gradients (PyTorch's
// register_comm_hook). The reducer hands each full bucket to the hook's start(), which launches
// the bucket's collectives and returns the last of them; once that Work is done, finish() leaves
// the average over the ranks in the bucket's buffer. Built in:
//   allreduce_hook()     the default: one average all-reduce per bucket, started during backward
//   delay_allreduce()    Apex's option: every bucket after the whole backward (no overlap); the
//                        same arithmetic, so the same bits as the default
//   fp16_compress(), bf16_compress()
//                        divide by the world size, cast to 16 bits, sum, cast back: half the
//                        bytes; dividing first keeps float16's sum from overflowing
//   powersgd({...})      low-rank compression (powersgd.h)
//   DistributedDataParallel ddp(model, {.comm_hook = parallel::bf16_compress()});
// A hook may also reduce a bucket where its gradients lie (start_in_place): the default hooks do
// when the communicator has all_reduce_coalesced (shared memory, threads), and the reducer then
// neither packs the gradients into the buffer nor copies the average back. A hook runs on the
// thread running backward, under the reducer's lock; it must issue the same collectives in the same
// order on every rank.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <memory>
#include <string>
#include <vector>

namespace tandem::parallel {

/// One bucket of gradients, as a hook sees it.
struct GradBucket {
  size_t index = 0;                // buckets are numbered in launch order, 0 first
  Tensor buffer;                   // [elements]: this rank's gradients, flat; then the average
  std::vector<Tensor> parameters;  // the bucket's parameters, in buffer order
  std::vector<int64_t> offsets;    // where each parameter's gradient starts in buffer
  /// Parameter i's gradient, as a view of buffer shaped like the parameter.
  Tensor gradient(size_t i) const;
};

class CommHook {
 public:
  virtual ~CommHook();
  virtual std::string name() const = 0;
  /// Launches the reduction of `bucket` over `group` and returns the Work to wait for.
  virtual WorkPtr start(Communicator& group, GradBucket& bucket) = 0;
  /// After that Work completed: leaves the average over the ranks in bucket.buffer.
  virtual void finish(Communicator& group, GradBucket& bucket);
  /// Launches the average of `gradients` (the bucket's, each contiguous) where they lie, and
  /// returns its Work; null (the default) where it cannot, and the reducer calls start(). After
  /// an in-place launch the reducer calls no finish(): the averages are in the gradients.
  virtual WorkPtr start_in_place(Communicator& group, std::vector<Tensor>& gradients);
  /// True: the reducer starts no bucket before backward has produced every gradient.
  virtual bool after_backward() const { return false; }
};

std::shared_ptr<CommHook> allreduce_hook();
std::shared_ptr<CommHook> delay_allreduce();
std::shared_ptr<CommHook> fp16_compress();
std::shared_ptr<CommHook> bf16_compress();

/// By name, for command lines: "allreduce", "delay_allreduce", "fp16_compress",
/// "bf16_compress", "powersgd", "powersgd:RANK" or "powersgd:RANK:START_ITER" (ValueError
/// listing them otherwise).
std::shared_ptr<CommHook> comm_hook_named(const std::string& name);

}  // namespace tandem::parallel
