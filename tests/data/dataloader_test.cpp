// The DataLoader: batch counts and the last partial batch, shuffle determinism across loaders
// and epochs, worker threads giving exactly the single-threaded batches in order, early exits
// that join their workers, and errors from a worker surfacing at the batch that raised them.
#include <tandem/data/dataloader.h>
#include <tandem/data/tensor_dataset.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <iterator>
#include <ranges>
#include <thread>

#include "support/expect.h"

using namespace tandem;
using namespace tandem::data;
using tandem::testing::error_message;
using ::testing::HasSubstr;

namespace {

// x[i] = [i, i] float, y[i] = i: a batch's labels say which examples it holds.
TensorDataset numbered(int64_t n) {
  return TensorDataset(arange(n, {.dtype = kFloat32}).unsqueeze(1).expand({n, 2}).contiguous(),
                       arange(n));
}

// Every batch's labels, in order, for one pass.
std::vector<std::vector<int64_t>> labels_of_one_pass(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& [x, y] : loader) out.push_back(y.to_vector<int64_t>());
  return out;
}

// Builds each example slowly and unevenly, so worker threads finish out of order.
class Jittery : public Dataset {
 public:
  explicit Jittery(int64_t n, int64_t fail_at = -1) : n_(n), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    ++calls;
    if (i == fail_at_) throw ValueError(str("Jittery: example ", i, " is broken"));
    std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 5 * 200));
    return {full({3}, double(i)), scalar_tensor(double(i), {.dtype = kInt64})};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_, fail_at_;
};

// Records whether grad mode was on in the thread that built each example.
class GradModeProbe : public Dataset {
 public:
  int64_t size() const override { return 8; }
  Example get(int64_t i) const override {
    ++calls;
    if (GradMode::is_enabled()) ++with_grad;
    return {full({2}, double(i)), scalar_tensor(double(i), {.dtype = kInt64})};
  }
  mutable std::atomic<int> calls{0}, with_grad{0};
};

int64_t thread_count() {
  return std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                       std::filesystem::directory_iterator());
}

// Joined threads leave /proc a moment after join returns, so allow them a second to go.
bool threads_return_to(int64_t n) {
  for (int i = 0; i < 100 && thread_count() != n; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return thread_count() == n;
}

}  // namespace

// Range-for and the standard algorithms see a real input range; a temporary dataset is refused
// at compile time, since the loader would keep a dangling reference to it.
static_assert(std::input_iterator<DataLoader::Iterator>);
static_assert(std::ranges::input_range<DataLoader>);
static_assert(!std::is_constructible_v<DataLoader, TensorDataset&&, DataLoaderOptions>);
static_assert(std::is_constructible_v<DataLoader, const TensorDataset&, DataLoaderOptions>);

TEST(DataLoader, CountsBatchesWithAndWithoutDropLast) {
  const TensorDataset ds = numbered(10);
  EXPECT_EQ(DataLoader(ds, {.batch_size = 3}).size(), 4);
  EXPECT_EQ(DataLoader(ds, {.batch_size = 3, .drop_last = true}).size(), 3);
  EXPECT_EQ(DataLoader(ds, {.batch_size = 5, .drop_last = true}).size(), 2);
  EXPECT_EQ(DataLoader(ds, {.batch_size = 20}).size(), 1);
  EXPECT_EQ(DataLoader(ds, {.batch_size = 20, .drop_last = true}).size(), 0);
}

TEST(DataLoader, SequentialBatchesCoverTheDatasetWithAPartialLastBatch) {
  const TensorDataset ds = numbered(10);
  DataLoader loader(ds, {.batch_size = 4});
  const auto batches = labels_of_one_pass(loader);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(batches[2], (std::vector<int64_t>{8, 9}));
  int64_t seen = 0;
  for (const Batch& b : loader) {
    EXPECT_EQ(b.x.shape(), Shape({b.y.size(0), 2}));
    seen += b.y.size(0);
  }
  EXPECT_EQ(seen, 10);
}

TEST(DataLoader, DropLastDropsOnlyTheShortBatch) {
  const TensorDataset ds = numbered(10);
  DataLoader loader(ds, {.batch_size = 4, .drop_last = true});
  const auto batches = labels_of_one_pass(loader);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1], (std::vector<int64_t>{4, 5, 6, 7}));
}

TEST(DataLoader, ShuffleIsFixedBySeedAndEpoch) {
  const TensorDataset ds = numbered(50);
  DataLoader a(ds, {.batch_size = 8, .shuffle = true, .seed = 3});
  DataLoader b(ds, {.batch_size = 8, .shuffle = true, .seed = 3});
  DataLoader c(ds, {.batch_size = 8, .shuffle = true, .seed = 4});
  const auto a0 = labels_of_one_pass(a), a1 = labels_of_one_pass(a);
  EXPECT_EQ(a0, labels_of_one_pass(b));  // same seed, same epoch
  EXPECT_EQ(a1, labels_of_one_pass(b));
  EXPECT_NE(a0, a1);  // epochs differ
  EXPECT_NE(a0, labels_of_one_pass(c));
  std::vector<int64_t> all;
  for (const auto& batch : a0) all.insert(all.end(), batch.begin(), batch.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(all[size_t(i)], i);  // each example once
}

TEST(DataLoader, SetEpochGivesTheSameOrderAsTheCounter) {
  const TensorDataset ds = numbered(30);
  DataLoader counted(ds, {.batch_size = 7, .shuffle = true, .seed = 11});
  DataLoader explicit_epoch(ds, {.batch_size = 7, .shuffle = true, .seed = 11});
  for (int e = 0; e < 3; ++e) (void)labels_of_one_pass(counted);
  EXPECT_EQ(counted.epoch(), 3);
  explicit_epoch.set_epoch(3);
  EXPECT_EQ(labels_of_one_pass(explicit_epoch), labels_of_one_pass(counted));
  EXPECT_EQ(explicit_epoch.epoch(), 4);
  auto it = explicit_epoch.begin();
  EXPECT_EQ(it.epoch(), 4);
  EXPECT_EQ(it.batch_index(), 0);
}

TEST(DataLoader, WorkersGiveExactlyTheSingleThreadedBatchesInOrder) {
  const Jittery ds(103);
  for (bool shuffle : {false, true}) {
    DataLoader serial(ds, {.batch_size = 4, .shuffle = shuffle, .seed = 9});
    DataLoader threaded(
        ds, {.batch_size = 4, .shuffle = shuffle, .seed = 9, .num_workers = 2, .prefetch = 3});
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<Batch> expected;
      for (const Batch& b : serial) expected.push_back(b);
      size_t k = 0;
      for (auto& [x, y] : threaded) {
        ASSERT_LT(k, expected.size());
        EXPECT_EQ(y.to_vector<int64_t>(), expected[k].y.to_vector<int64_t>()) << "batch " << k;
        EXPECT_EQ(x.to_vector<float>(), expected[k].x.to_vector<float>()) << "batch " << k;
        ++k;
      }
      EXPECT_EQ(k, expected.size());
    }
  }
}

TEST(DataLoader, BreakingOutEarlyJoinsTheWorkers) {
  const Jittery ds(400);
  (void)get_num_threads();  // start the intra-op pool first, so it does not count below
  const int64_t threads_before = thread_count();
  DataLoader::Iterator survivor;
  {
    DataLoader loader(ds, {.batch_size = 2, .num_workers = 3, .prefetch = 2});
    for (int pass = 0; pass < 5; ++pass) {
      for (auto& [x, y] : loader) {
        if (y.to_vector<int64_t>()[0] >= 4) break;
      }
      // The loop's iterator is gone, and with it the pass and its workers.
      EXPECT_TRUE(threads_return_to(threads_before)) << "after pass " << pass;
    }
    survivor = loader.begin();  // still running when the loader is destroyed
    EXPECT_GT(thread_count(), threads_before);
  }
  EXPECT_TRUE(threads_return_to(threads_before));
  EXPECT_THROW(++survivor, Error);
}

TEST(DataLoader, WorkersBuildAtMostPrefetchTimesWorkersBatchesAhead) {
  const Jittery ds(100);
  DataLoader loader(ds, {.batch_size = 1, .num_workers = 2, .prefetch = 1});
  auto it = loader.begin();  // batch 0 taken; batches 1 and 2 may be built, no more
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_LE(ds.calls.load(), 3);
  ++it;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_LE(ds.calls.load(), 4);
}

TEST(DataLoader, AWorkersExceptionSurfacesAtItsBatch) {
  for (int workers : {0, 2}) {
    const Jittery ds(20, /*fail_at=*/7);
    DataLoader loader(ds, {.batch_size = 2, .num_workers = workers});
    std::vector<int64_t> seen;
    auto it = loader.begin();
    const std::string msg = error_message<ValueError>([&] {
      for (; it != loader.end(); ++it) seen.push_back(it.batch_index());
    });
    EXPECT_THAT(msg, HasSubstr("example 7 is broken"));
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2})) << workers << " workers";  // batch 3 failed
    EXPECT_TRUE(it == loader.end());                                            // the pass is over
    EXPECT_THROW(labels_of_one_pass(loader), ValueError);  // the next pass fails there too
  }
}

TEST(DataLoader, AnErrorInTheFirstBatchIsThrownByBegin) {
  const Jittery ds(4, /*fail_at=*/0);
  DataLoader loader(ds, {.batch_size = 2, .num_workers = 1});
  EXPECT_THROW(loader.begin(), ValueError);
}

TEST(DataLoader, AnIteratorOfAnEarlierPassRefusesToAdvance) {
  const TensorDataset ds = numbered(10);
  DataLoader loader(ds, {.batch_size = 2});
  auto first = loader.begin();
  auto second = loader.begin();
  EXPECT_THAT(error_message<Error>([&] { ++first; }), HasSubstr("later begin()"));
  EXPECT_EQ(second->y.to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
}

TEST(DataLoader, UsesAGivenSampler) {
  struct Reversed : Sampler {
    int64_t size() const override { return 6; }
    std::vector<int64_t> indices(int64_t) const override { return {5, 4, 3, 2, 1, 0}; }
  };
  const TensorDataset ds = numbered(6);
  DataLoader loader(ds, {.batch_size = 4}, std::make_shared<Reversed>());
  EXPECT_EQ(labels_of_one_pass(loader), (std::vector<std::vector<int64_t>>{{5, 4, 3, 2}, {1, 0}}));
}

TEST(DataLoader, RejectsBadOptions) {
  const TensorDataset ds = numbered(4);
  EXPECT_THAT(error_message<ValueError>([&] { DataLoader(ds, {.batch_size = 0}); }),
              HasSubstr("batch_size"));
  EXPECT_THROW(DataLoader(ds, {.num_workers = -1}), ValueError);
  EXPECT_THROW(DataLoader(ds, {.num_workers = 1, .prefetch = 0}), ValueError);
  EXPECT_THAT(error_message<ValueError>([&] {
                DataLoader(ds, {.shuffle = true}, std::make_shared<SequentialSampler>(4));
              }),
              HasSubstr("shuffle"));
}

TEST(DataLoader, AnEmptyDatasetHasNoBatches) {
  const TensorDataset ds(zeros({0, 3}), arange(0));
  DataLoader loader(ds, {.batch_size = 4, .num_workers = 2});
  EXPECT_EQ(loader.size(), 0);
  EXPECT_TRUE(loader.begin() == loader.end());
}

// Workers take on the thread-local state of the thread that starts the pass (here: grad mode off):
// a dataset that computes with tensors records no graph inside an evaluation loop.
TEST(DataLoader, WorkersRunUnderTheThreadLocalStateOfTheLoop) {
  const GradModeProbe ds;
  {
    NoGradGuard off;
    DataLoader loader(ds, {.batch_size = 2, .num_workers = 2});
    for (auto& [x, y] : loader) EXPECT_FALSE(x.requires_grad());
  }
  EXPECT_EQ(ds.calls, 8);
  EXPECT_EQ(ds.with_grad, 0) << "a worker built examples with grad mode on";
}
