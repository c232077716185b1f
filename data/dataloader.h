// data/dataloader.h — batches from a dataset, one epoch per pass, as torch.utils.data.DataLoader:
//   DataLoader loader(dataset, {.batch_size = 64, .shuffle = true, .num_workers = 2});
//   for (int epoch = 0; epoch < 3; ++epoch)
//     for (auto& [x, y] : loader) { ... }   // x [64, ...], y [64]
// Each begin() starts the next epoch (set_epoch overrides it); the order is a function of
// (seed, epoch) only, and worker threads never change which batches come out or in what order.
#pragma once

#include <tandem/data/dataset.h>
#include <tandem/data/sampler.h>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>

namespace tandem::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;     // a RandomSampler(seed) instead of a SequentialSampler
  uint64_t seed = 0;        // shuffle order = f(seed, epoch): fixed seed, reproducible runs
  bool drop_last = false;   // drop the last batch when it would be smaller than batch_size
  int num_workers = 0;      // 0: build batches on the calling thread; N: on N worker threads
  int prefetch = 2;         // batches each worker may build ahead (queue of prefetch·num_workers)
  bool pin_memory = false;  // page-locked batches: faster copies to a GPU (no-op without one)
};

namespace detail {
struct EpochRun;
}

class DataLoader {
 public:
  class Iterator;

  /// Batches of `dataset` (which must outlive the loader). `sampler` replaces the default order
  /// (sequential, or random when options.shuffle); giving both a sampler and shuffle is a
  /// ValueError, as in PyTorch.
  DataLoader(const Dataset& dataset, DataLoaderOptions options = {},
             std::shared_ptr<Sampler> sampler = nullptr);
  /// The loader keeps a reference to its dataset, so a temporary one would dangle.
  DataLoader(const Dataset&& dataset, DataLoaderOptions options = {},
             std::shared_ptr<Sampler> sampler = nullptr) = delete;
  ~DataLoader();  // stops a pass still running and joins its workers
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;

  /// Starts a pass over epoch epoch(), then advances the epoch counter. A pass still running
  /// (a loop left with break) is stopped first; its iterators then throw if advanced.
  Iterator begin();
  Iterator end() const;
  /// Batches per epoch: ceil(n / batch_size), or floor with drop_last (n = sampler size).
  int64_t size() const;
  /// The epoch the next begin() iterates (0 at first). Calling set_epoch(e) before each epoch, as
  /// with PyTorch's DistributedSampler, gives the same order as letting the counter run.
  int64_t epoch() const { return next_epoch_; }
  void set_epoch(int64_t epoch);

  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  const Sampler& sampler() const { return *sampler_; }

 private:
  void stop_running_pass();

  const Dataset* dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  int64_t next_epoch_ = 0;
  // The pass in progress is owned by its iterators: when the last one goes (a loop ends or
  // breaks) its workers are joined. The loader only watches it, to stop it on a new begin().
  std::weak_ptr<detail::EpochRun> running_;
};

/// An input iterator over one pass. Copies share the pass (like std::istream_iterator).
class DataLoader::Iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using pointer = Batch*;
  using reference = Batch&;

  Iterator() = default;  // the end
  /// The current batch; valid until the iterator advances.
  Batch& operator*() const;
  Batch* operator->() const { return &**this; }
  /// Moves to the next batch. An exception a worker threw building it is rethrown here, and the
  /// pass ends (the iterator becomes the end).
  Iterator& operator++();
  void operator++(int) { ++*this; }
  /// The number of the current batch in its epoch (0, 1, …).
  int64_t batch_index() const;
  /// The epoch this pass iterates.
  int64_t epoch() const;

  friend bool operator==(const Iterator& a, const Iterator& b);

 private:
  friend class DataLoader;
  explicit Iterator(std::shared_ptr<detail::EpochRun> run) : run_(std::move(run)) {}
  bool at_end() const;
  std::shared_ptr<detail::EpochRun> run_;
};

}  // namespace tandem::data
