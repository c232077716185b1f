// data/batch_producer.cpp — the DataLoader's worker threads. Workers claim batch numbers in
// order from a shared counter, build them outside the lock, and drop each into a ring of
// `capacity` slots; a worker may only claim batch k once batch k − capacity has been taken, which
// bounds the memory held by prefetched batches. Kernels the workers run (a dataset that does
// tensor math in get()) go through core's intra-op pool, which shares its threads fairly among
// concurrent callers. Each worker runs under the ThreadLocalState of the thread that made the
// loader (grad mode, non-blocking copies, current streams).
#include <tandem/autograd/thread_local_state.h>
#include <tandem/core/check.h>
#include <tandem/core/cuda_device.h>
#include <tandem/data/batch_producer.h>
#include <string>
#if defined(__linux__)
#include <pthread.h>
#endif

namespace tandem::data::detail {

BatchProducer::BatchProducer(const Dataset& dataset, std::vector<std::vector<int64_t>> batches,
                             int workers, int capacity, bool pin_memory)
    : dataset_(dataset),
      pin_memory_(pin_memory),
      batches_(std::move(batches)),
      capacity_(capacity) {
  if (workers <= 0) return;
  TD_INTERNAL_ASSERT(capacity >= 1, "prefetch capacity ", capacity);
  slots_.resize(size_t(capacity));
  try {
    for (int w = 0; w < workers; ++w) {
      workers_.emplace_back([this, state = ThreadLocalState::capture()] {
        ThreadLocalStateGuard guard(state);
        work();
      });
#if defined(__linux__)
      // Named threads show up in top -H and gdb as the data loader's.
      pthread_setname_np(workers_.back().native_handle(),
                         ("tandem-data-" + std::to_string(w)).c_str());
#endif
    }
  } catch (...) {
    stop();  // a thread failed to start: do not leave the others running
    throw;
  }
}

BatchProducer::~BatchProducer() { stop(); }

void BatchProducer::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  space_cv_.notify_all();
  for (std::thread& t : workers_)
    if (t.joinable()) t.join();
  workers_.clear();
}

void BatchProducer::work() {
  const int64_t total = int64_t(batches_.size());
  for (;;) {
    int64_t k = 0;
    {
      std::unique_lock lk(mu_);
      space_cv_.wait(
          lk, [&] { return stop_ || claimed_ >= total || claimed_ < consumed_ + capacity_; });
      if (stop_ || claimed_ >= total) return;
      k = claimed_++;
    }
    Slot built;
    try {
      built.batch = build(k);
    } catch (...) {
      built.error = std::current_exception();  // handed over with the batch, in its place
    }
    built.ready = true;
    {
      std::lock_guard lk(mu_);
      slots_[size_t(k % capacity_)] = std::move(built);
    }
    ready_cv_.notify_one();  // there is one consumer
  }
}

Batch BatchProducer::build(int64_t k) const {
  Batch b = dataset_.get_batch(batches_[size_t(k)]);
  if (pin_memory_) {  // on the worker, so the copy overlaps the training step
    if (b.x.defined() && b.x.device().is_cpu()) b.x = cuda::pin_memory(b.x);
    if (b.y.defined() && b.y.device().is_cpu()) b.y = cuda::pin_memory(b.y);
  }
  return b;
}

Batch BatchProducer::next() {
  TD_CHECK_INDEX(has_next(), "DataLoader: no batch left in this epoch (", batches_.size(),
                 " batches)");
  const int64_t k = taken_++;
  if (workers_.empty() && slots_.empty()) return build(k);
  TD_CHECK(!workers_.empty(), "DataLoader: batch ", k, " was asked for after the workers stopped");
  Slot slot;
  {
    std::unique_lock lk(mu_);
    Slot& s = slots_[size_t(k % capacity_)];
    ready_cv_.wait(lk, [&] { return s.ready; });
    slot = std::move(s);
    s = Slot();
    consumed_ = taken_;
  }
  space_cv_.notify_all();  // several workers may be waiting for room
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.batch);
}

}  // namespace tandem::data::detail
