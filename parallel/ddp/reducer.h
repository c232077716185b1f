// parallel/ddp/reducer.h — the gradient all-reduce of DistributedDataParallel. Each bucket (see
// bucket_plan.h) owns a flat buffer. When a parameter's gradient is complete, its
// post-accumulate hook calls mark_ready(), which copies the gradient into its bucket's slice;
// the last gradient of a bucket hands it to the communication hook (comm_hook.h; by default an
// asynchronous average all-reduce) while backward goes on. Buckets start strictly in index order,
// the same on every rank, since collectives must be issued in the same order everywhere. finalize()
// runs when backward ends: it waits for every bucket and writes the averaged gradients back into
// .grad. Where the hook can reduce the gradients where they lie (the default hooks over shared
// memory or threads: CommHook::start_in_place), nothing is copied and the buffer is never
// allocated; the first bucket it declines turns that off. Under ZeRO (zero_shards.h) a bucket is
// reduce-scattered instead (ZeRO-2's where the gradients lie, as DDP's all-reduce), and
// finalize() hands each rank's averaged chunk to its optimizer's pieces. If backward fails
// part-way, the buckets already launched still write their averages (into .grad, where reduced in
// place) until the next forward waits for them: call zero_grad() before trying the step again.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <tandem/parallel/ddp/comm_hook.h>
#include <tandem/parallel/ddp/zero_shards.h>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::parallel {

class Reducer {
 public:
  Reducer(std::vector<Tensor> params, std::vector<std::string> names,
          std::vector<std::vector<size_t>> buckets, std::shared_ptr<Communicator> comm,
          bool find_unused_parameters, std::shared_ptr<CommHook> hook = nullptr,
          std::shared_ptr<ZeroShards> zero = nullptr, bool grad_as_bucket_view = false);

  /// Called by each parameter's post-accumulate hook during backward.
  void mark_ready(size_t param);
  /// Waits for every bucket and writes the averages into .grad. Parameters that got no gradient
  /// are an error naming them, unless find_unused_parameters (then their gradient counts as
  /// zero on this rank, and stays undefined if no rank produced one, as on one device).
  void finalize();
  /// The gradients accumulated in .grad under no_sync(), reduced now, outside backward, as one
  /// backward's would be (the buckets in order, ZeRO's reduce-scatter, finalize()'s checks): for
  /// a caller whose backward passes are not its own to wrap (a pipeline stage's micro-batches;
  /// Megatron's finish_grad_sync). Call it outside no_sync().
  void reduce_accumulated();
  /// Called before each forward: if the previous backward failed part-way (a node or hook threw,
  /// so finalize() never ran), waits out the collectives it launched and starts afresh.
  void recover_from_failed_backward();
  /// Off: hooks do nothing and gradients accumulate locally (no_sync()).
  void set_sync(bool on) { sync_ = on; }
  bool sync() const { return sync_; }

  size_t bucket_count() const { return buckets_.size(); }
  /// True while buckets are reduced where the gradients lie (no bucket buffer): from the start
  /// for host parameters without ZeRO-1 or gradient_as_bucket_view, until a hook or the
  /// communicator declines, which the first backward shows. Read it between steps.
  bool reduces_in_place() const { return try_in_place_; }
  /// The parameter indices of bucket `b`, in the order they sit in its buffer.
  const std::vector<size_t>& bucket(size_t b) const { return buckets_[b].params; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    GradBucket view;     // what the hook sees: index, flat buffer, parameters, offsets
    int64_t size = 0;    // elements in the buffer (ZeRO: with padding)
    size_t pending = 0;  // gradients not yet final in this iteration
    WorkPtr work;        // the hook's collective in flight (null: not launched)
    // Launched in place: the gradients reduced where they lie, in bucket order (zeros made for
    // a parameter without one), for finish() to hand over. Empty otherwise.
    std::vector<Tensor> in_place;
  };
  void reset_iteration();
  void allocate_buffer(Bucket& b);
  void release_reduced_buckets(size_t launched);
  void launch_ready_buckets();
  void launch(size_t bucket);
  bool launch_in_place(Bucket& b);
  void ready(size_t param);    // the gradient is final for this backward
  void copy_in(size_t param);  // .grad (zeros if none) into the bucket's buffer
  void wait_all_quietly();
  void finish();            // finalize() past the error checks
  void finish_and_reset();  // finish(), then a fresh iteration whether it threw or not

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // param -> bucket
  std::vector<size_t> slot_of_;    // param -> its position in the bucket (offsets[slot])
  std::vector<bool> ready_;        // param -> gradient final this iteration
  std::vector<bool> copied_;       // param -> gradient copied into its bucket this iteration
  std::vector<bool> had_grad_;     // param -> produced a gradient on this rank this iteration
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<CommHook> hook_;
  // ZeRO: buckets are padded and reduce-scattered; .grad is freed once copied in; stage 2 also
  // frees each bucket's buffer between steps. Null: plain DDP.
  std::shared_ptr<ZeroShards> zero_;
  bool find_unused_;
  bool grad_as_view_;  // gradient_as_bucket_view: .grad is a view of the bucket slice
  bool try_in_place_;  // until the hook declines: buckets reduced where the gradients lie
  Tensor used_;  // find_unused: [params] 1/0 flags, all-reduced with max (on the buckets' device)
  // Backward may run the parameters' hooks on several threads at once (one per device); every
  // entry point takes this lock.
  std::mutex mutex_;
  std::vector<size_t> missing_;  // scratch of finalize(), kept to avoid an allocation per step
  bool sync_ = true;
  bool in_backward_ = false;  // a finalize() callback is queued
  size_t next_launch_ = 0;    // the next bucket to start
  size_t released_ = 0;       // ZeRO-2: buckets before this one are reduced and freed
};

}  // namespace tandem::parallel
