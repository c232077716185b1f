// data/batch_producer.h — builds one epoch's batches, in order, for the DataLoader: on the calling
// thread (no workers), or on worker threads that run ahead of the consumer by a bounded number of
// batches. Batch k is always the k-th one handed out, whichever thread built it, so the batches
// never depend on the number of workers or on timing.
#pragma once

#include <tandem/data/dataset.h>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::data::detail {

class BatchProducer {
 public:
  /// Will build dataset.get_batch(batches[k]) for k = 0, 1, …. With workers > 0, that many
  /// threads start now and build at most `capacity` batches beyond the last one taken.
  /// With `pin_memory`, each batch is copied into page-locked memory by whoever builds it.
  BatchProducer(const Dataset& dataset, std::vector<std::vector<int64_t>> batches, int workers,
                int capacity, bool pin_memory = false);
  ~BatchProducer();  // stop()
  BatchProducer(const BatchProducer&) = delete;
  BatchProducer& operator=(const BatchProducer&) = delete;

  bool has_next() const { return taken_ < int64_t(batches_.size()); }
  /// The next batch in order, waiting for it if a worker is still building it. An exception
  /// thrown while building it is rethrown here, on the consumer's thread.
  Batch next();
  /// Workers finish the batch in hand (get_batch cannot be interrupted) and exit; joins them.
  /// Safe to call more than once.
  void stop();

 private:
  Batch build(int64_t k) const;  // get_batch, then pin when asked
  struct Slot {
    bool ready = false;
    Batch batch;
    std::exception_ptr error;
  };
  void work();

  const Dataset& dataset_;
  bool pin_memory_ = false;
  const std::vector<std::vector<int64_t>> batches_;
  const int64_t capacity_;
  int64_t taken_ = 0;  // batches handed to the consumer

  // Shared with the workers, under mu_.
  std::mutex mu_;
  std::condition_variable ready_cv_;  // a slot was filled (the consumer waits)
  std::condition_variable space_cv_;  // a slot was freed, or stop (workers wait)
  std::vector<Slot> slots_;           // batch k lives in slots_[k % capacity_]
  int64_t claimed_ = 0;               // batches a worker has started
  int64_t consumed_ = 0;              // == taken_, as the workers see it
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace tandem::data::detail
