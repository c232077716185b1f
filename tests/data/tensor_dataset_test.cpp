// TensorDataset (row views, the memcpy gather) and Dataset's default get_batch, which stacks the
// examples of any dataset that only implements get().
#include <tandem/data/tensor_dataset.h>

#include "support/expect.h"

using namespace tandem;
using namespace tandem::data;
using tandem::testing::error_message;
using tandem::testing::values;
using ::testing::HasSubstr;

namespace {

// x = arange(12) as [4, 3]; y = [10, 11, 12, 13] int64.
TensorDataset small_dataset() {
  return TensorDataset(arange(12, {.dtype = kFloat32}).reshape({4, 3}),
                       from_vector<int64_t>({10, 11, 12, 13}, {4}));
}

// Only get() is implemented, so get_batch is Dataset's default stacking.
class Squares : public Dataset {
 public:
  int64_t size() const override { return 5; }
  Example get(int64_t index) const override {
    tandem::data::detail::check_index("Squares::get", index, size());
    return {full({2, 2}, double(index * index)), scalar_tensor(double(index), {.dtype = kInt64})};
  }
};

// Example 3 has a different shape from the others.
class Ragged : public Squares {
 public:
  Example get(int64_t index) const override {
    return {full({index == 3 ? 3 : 2, 2}, 1.0), scalar_tensor(0, {.dtype = kInt64})};
  }
};

}  // namespace

TEST(TensorDataset, GetReturnsRowIOfEachTensor) {
  const TensorDataset ds = small_dataset();
  EXPECT_EQ(ds.size(), 4);
  auto [x, y] = ds.get(2);
  EXPECT_EQ(x.shape(), Shape({3}));
  EXPECT_EQ(values(x), (std::vector<double>{6, 7, 8}));
  EXPECT_EQ(y.shape(), Shape({}));
  EXPECT_EQ(y.dtype(), kInt64);
  EXPECT_EQ(y.item(), 12);
}

TEST(TensorDataset, GetBatchGathersRowsIntoNewContiguousTensors) {
  const TensorDataset ds = small_dataset();
  Batch batch = ds.get_batch({3, 0, 3});
  auto& [x, y] = batch;
  EXPECT_EQ(x.shape(), Shape({3, 3}));
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_EQ(values(x), (std::vector<double>{9, 10, 11, 0, 1, 2, 9, 10, 11}));
  EXPECT_EQ(y.shape(), Shape({3}));
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{13, 10, 13}));
  x.fill_(-1);  // a copy: the dataset is untouched
  EXPECT_EQ(values(ds.get(0).x), (std::vector<double>{0, 1, 2}));
}

TEST(TensorDataset, RejectsTensorsWhoseFirstDimsDiffer) {
  const std::string msg = error_message<ShapeError>([] {
    TensorDataset(zeros({4, 3}), zeros({5}, {.dtype = kInt64}));
  });
  EXPECT_THAT(msg, HasSubstr("[4, 3]"));
  EXPECT_THAT(msg, HasSubstr("[5]"));
}

TEST(TensorDataset, IndexOutOfRangeNamesTheIndexAndTheSize) {
  const TensorDataset ds = small_dataset();
  std::string msg = error_message<IndexError>([&] { ds.get(4); });
  EXPECT_THAT(msg, HasSubstr("index 4"));
  EXPECT_THAT(msg, HasSubstr("size 4"));
  msg = error_message<IndexError>([&] { ds.get_batch({0, -1}); });
  EXPECT_THAT(msg, HasSubstr("index -1"));
}

TEST(TensorDataset, AcceptsNonContiguousTensors) {
  const Tensor x = arange(6, {.dtype = kFloat32}).reshape({2, 3}).t();  // [3, 2], strided
  const TensorDataset ds(x, arange(3));
  EXPECT_EQ(values(ds.get(1).x), (std::vector<double>{1, 4}));
  EXPECT_EQ(values(ds.get_batch({2, 1}).x), (std::vector<double>{2, 5, 1, 4}));
}

TEST(TensorDataset, WithoutLabelsGivesUndefinedY) {
  const TensorDataset ds(ones({3, 2}));
  EXPECT_FALSE(ds.get(0).y.defined());
  const Batch b = ds.get_batch({0, 2});
  EXPECT_EQ(b.x.shape(), Shape({2, 2}));
  EXPECT_FALSE(b.y.defined());
}

TEST(TensorDataset, BatchesStayOnTheDatasetsDevice) {
  const Device cpu1("cpu:1");
  const TensorDataset ds(ones({4, 2}, {.device = cpu1}), arange(4).to(cpu1));
  const Batch b = ds.get_batch({1, 2});
  EXPECT_EQ(b.x.device(), cpu1);
  EXPECT_EQ(b.y.device(), cpu1);
}

TEST(Dataset, DefaultGetBatchStacksExamplesAlongANewFirstDim) {
  const Squares ds;
  const Batch b = ds.get_batch({3, 1});
  EXPECT_EQ(b.x.shape(), Shape({2, 2, 2}));
  EXPECT_TRUE(b.x.is_contiguous());
  EXPECT_EQ(values(b.x), (std::vector<double>{9, 9, 9, 9, 1, 1, 1, 1}));
  EXPECT_EQ(b.y.shape(), Shape({2}));  // one scalar label per example
  EXPECT_EQ(b.y.dtype(), kInt64);
  EXPECT_EQ(b.y.to_vector<int64_t>(), (std::vector<int64_t>{3, 1}));
}

TEST(Dataset, DefaultGetBatchMatchesTheTensorGather) {
  // A dataset that forwards get() to a TensorDataset but keeps the default get_batch.
  struct Forward : Dataset {
    TensorDataset inner = small_dataset();
    int64_t size() const override { return inner.size(); }
    Example get(int64_t i) const override { return inner.get(i); }
  } fwd;
  const std::vector<int64_t> idx = {2, 0, 1, 2};
  const Batch a = fwd.get_batch(idx), b = fwd.inner.get_batch(idx);
  EXPECT_EQ(values(a.x), values(b.x));
  EXPECT_EQ(a.y.to_vector<int64_t>(), b.y.to_vector<int64_t>());
}

TEST(Dataset, DefaultGetBatchRejectsExamplesThatDoNotStack) {
  const std::string msg = error_message<ShapeError>([] { Ragged().get_batch({0, 3}); });
  EXPECT_THAT(msg, HasSubstr("example 3"));
  EXPECT_THAT(msg, HasSubstr("[3, 2]"));
  EXPECT_THAT(msg, HasSubstr("[2, 2]"));
}

TEST(Dataset, DefaultGetBatchPassesOnTheIndexError) {
  const std::string msg = error_message<IndexError>([] { Squares().get_batch({1, 5}); });
  EXPECT_THAT(msg, HasSubstr("index 5"));
  EXPECT_THAT(msg, HasSubstr("size 5"));
}
