// data/dataloader.cpp — the DataLoader and its iterator. A pass (EpochRun) is created by begin():
// it asks the sampler for the epoch's indices, cuts them into batches and hands them to a
// BatchProducer (data/batch_producer.h), which builds them on this thread or on workers. The
// iterators share the pass; when the last one is destroyed the workers are joined, so leaving a
// loop with break costs at most the batches already in flight.
#include <tandem/core/check.h>
#include <tandem/data/batch_producer.h>
#include <tandem/data/dataloader.h>
#include <algorithm>

namespace tandem::data {
namespace detail {

struct EpochRun {
  EpochRun(const Dataset& dataset, std::vector<std::vector<int64_t>> batches, int workers,
           int capacity, int64_t epoch, bool pin_memory)
      : producer(dataset, std::move(batches), workers, capacity, pin_memory), epoch(epoch) {}

  // Builds (or waits for) the next batch; past the last one, the pass is finished.
  void advance() {
    if (!producer.has_next()) return finish();
    try {
      current = producer.next();
      ++index;
    } catch (...) {
      finish();  // a failed pass ends: its workers are joined before the error reaches the user
      throw;
    }
  }
  void finish() {
    finished = true;
    current = Batch();
    producer.stop();
  }

  BatchProducer producer;
  const int64_t epoch;
  Batch current;
  int64_t index = -1;
  bool finished = false;
  bool superseded = false;
};

}  // namespace detail

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options,
                       std::shared_ptr<Sampler> sampler)
    : dataset_(&dataset), options_(options), sampler_(std::move(sampler)) {
  TD_CHECK_VALUE(options.batch_size >= 1, "DataLoader: batch_size must be at least 1, but got ",
                 options.batch_size);
  TD_CHECK_VALUE(options.num_workers >= 0, "DataLoader: num_workers must be >= 0, but got ",
                 options.num_workers);
  TD_CHECK_VALUE(options.prefetch >= 1, "DataLoader: prefetch must be at least 1, but got ",
                 options.prefetch);
  TD_CHECK_VALUE(!(sampler_ && options.shuffle),
                 "DataLoader: a sampler was given together with shuffle = true; the sampler "
                 "decides the order\n  hint: drop .shuffle, or drop the sampler");
  if (!sampler_) {
    if (options.shuffle)
      sampler_ = std::make_shared<RandomSampler>(dataset.size(), options.seed);
    else
      sampler_ = std::make_shared<SequentialSampler>(dataset.size());
  }
}

DataLoader::~DataLoader() { stop_running_pass(); }

DataLoader::DataLoader(DataLoader&& other) noexcept = default;

DataLoader& DataLoader::operator=(DataLoader&& other) noexcept {
  if (this != &other) {
    stop_running_pass();
    dataset_ = other.dataset_;
    options_ = other.options_;
    sampler_ = std::move(other.sampler_);
    next_epoch_ = other.next_epoch_;
    running_ = std::move(other.running_);
  }
  return *this;
}

void DataLoader::stop_running_pass() {
  if (std::shared_ptr<detail::EpochRun> run = running_.lock()) {
    run->superseded = true;
    run->finish();
  }
  running_.reset();
}

void DataLoader::set_epoch(int64_t epoch) {
  TD_CHECK_VALUE(epoch >= 0, "DataLoader::set_epoch: expected an epoch >= 0, but got ", epoch);
  next_epoch_ = epoch;
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  stop_running_pass();
  const int64_t epoch = next_epoch_++;
  const std::vector<int64_t> order = sampler_->indices(epoch);
  TD_CHECK(int64_t(order.size()) == sampler_->size(), "DataLoader: the sampler returned ",
           order.size(), " indices for epoch ", epoch, ", but its size() is ", sampler_->size());
  std::vector<std::vector<int64_t>> batches;
  batches.reserve(size_t(size()));
  const size_t b = size_t(options_.batch_size);
  for (size_t start = 0; start < order.size(); start += b) {
    const size_t stop = std::min(order.size(), start + b);
    if (stop - start < b && options_.drop_last) break;
    batches.emplace_back(order.begin() + std::ptrdiff_t(start),
                         order.begin() + std::ptrdiff_t(stop));
  }
  // No more workers than batches: a short epoch should not start idle threads.
  const int workers = int(std::min<int64_t>(options_.num_workers, int64_t(batches.size())));
  auto run = std::make_shared<detail::EpochRun>(*dataset_, std::move(batches), workers,
                                                options_.prefetch * options_.num_workers, epoch,
                                                options_.pin_memory);
  running_ = run;
  run->advance();  // the first batch, so *begin() is valid (and its error surfaces here)
  return Iterator(std::move(run));
}

DataLoader::Iterator DataLoader::end() const { return Iterator(); }

bool DataLoader::Iterator::at_end() const { return run_ == nullptr || run_->finished; }

Batch& DataLoader::Iterator::operator*() const {
  TD_CHECK_INDEX(!at_end(), "DataLoader: dereferencing an iterator past the last batch");
  return run_->current;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  TD_CHECK(run_ == nullptr || !run_->superseded, "DataLoader: this pass over epoch ", run_->epoch,
           " was stopped by a later begin() (or the DataLoader was destroyed); "
           "iterate one pass at a time");
  TD_CHECK_INDEX(!at_end(), "DataLoader: advancing an iterator past the last batch");
  run_->advance();
  return *this;
}

int64_t DataLoader::Iterator::batch_index() const {
  TD_CHECK_INDEX(!at_end(), "DataLoader: batch_index of an iterator past the last batch");
  return run_->index;
}

int64_t DataLoader::Iterator::epoch() const {
  TD_CHECK_INDEX(run_ != nullptr, "DataLoader: epoch of an end iterator");
  return run_->epoch;
}

bool operator==(const DataLoader::Iterator& a, const DataLoader::Iterator& b) {
  if (a.at_end() || b.at_end()) return a.at_end() == b.at_end();
  return a.run_ == b.run_;  // copies share one pass, so they are always at the same batch
}

}  // namespace tandem::data
