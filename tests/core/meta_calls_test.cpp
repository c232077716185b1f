// meta_calls.h: a recorder attached to meta:N hears each kernel the ops on meta:N would run, by a
// signature that carries what its time depends on (label, shapes, flags), with the bytes and a
// matrix product's flops; the call can be replayed for real on the CPU, and timed.
#include <tandem/core/kernels/meta_calls.h>
#include <mutex>

#include "support/expect.h"

using namespace tandem;
using ::testing::HasSubstr;

namespace {

struct Keep : meta_calls::Recorder {
  std::mutex mu;
  std::vector<meta_calls::Call> calls;
  std::vector<meta_calls::Replay> replays;
  void record(const meta_calls::Call& c,
              const std::function<meta_calls::Replay()>& replay) override {
    const std::lock_guard<std::mutex> lock(mu);
    calls.push_back(c);
    replays.push_back(replay());
  }
};

}  // namespace

TEST(MetaCalls, ARecorderHearsEachKernelOfItsDeviceOnly) {
  Keep keep;
  const Device m = Device::meta(5);
  Tensor a = empty({64, 32}, {.device = m}), b = empty({32, 16}, {.device = m});
  Tensor other = empty({8, 8}, {.device = Device::meta(6)});
  meta_calls::attach(5, &keep);
  Tensor c = relu(matmul(a, b));
  Tensor unseen = relu(other);  // meta:6 has no recorder
  meta_calls::attach(5, nullptr);
  Tensor after = relu(c);  // detached
  ASSERT_EQ(keep.calls.size(), 2u);
  EXPECT_EQ(keep.calls[0].label, "gemm float32");
  EXPECT_EQ(keep.calls[0].signature, "gemm float32 [64,32] [32,16] [64,16] F F");
  EXPECT_DOUBLE_EQ(keep.calls[0].flops, 2.0 * 64 * 16 * 32);
  EXPECT_DOUBLE_EQ(keep.calls[0].bytes, (64 * 32 + 32 * 16 + 64 * 16) * 4.0);
  EXPECT_EQ(keep.calls[1].label, "unary relu float32");
  EXPECT_THAT(keep.calls[1].signature, HasSubstr("[64,16] [64,16]"));
}

TEST(MetaCalls, AStridedOperandIsNamedByItsStrides) {
  Keep keep;
  Tensor a = empty({32, 64}, {.device = Device::meta(5)});
  meta_calls::attach(5, &keep);
  Tensor c = a.t().contiguous();
  meta_calls::attach(5, nullptr);
  ASSERT_EQ(keep.calls.size(), 1u);
  EXPECT_EQ(keep.calls[0].signature, "copy float32 [64,32]/[1,64] [64,32]");
}

TEST(MetaCalls, ARecordedCallRunsForRealOnTheCpu) {
  Keep keep;
  const Device m = Device::meta(5);
  Tensor w = empty({16, 8}, {.device = m, .requires_grad = true});
  Tensor x = empty({4, 8}, {.device = m});
  meta_calls::attach(5, &keep);
  Tensor loss = linear(x, w, Tensor()).sum();
  loss.backward();  // the backward's kernels too, from the engine's thread for meta:5
  meta_calls::attach(5, nullptr);
  ASSERT_GE(keep.calls.size(), 3u);
  for (size_t i = 0; i < keep.calls.size(); ++i) {
    const double seconds = meta_calls::time_replay(keep.replays[i], Device::cpu());
    EXPECT_GT(seconds, 0) << keep.calls[i].signature;
    EXPECT_LT(seconds, 1) << keep.calls[i].signature;
  }
  EXPECT_THROW(meta_calls::time_replay(keep.replays[0], Device::meta(0)), DeviceError);
}

TEST(MetaCalls, APlaceholderHasTheSpecsLayoutAndValidValues) {
  const Tensor t = empty({3, 4}, {.device = Device::meta(1)}).t();
  const Tensor p = meta_calls::placeholder(meta_calls::spec_of(t), Device::cpu());
  EXPECT_EQ(p.shape(), (Shape{4, 3}));
  EXPECT_EQ(p.strides(), t.strides());
  EXPECT_DOUBLE_EQ(p.sum().item(), 6.0);  // 0.5 everywhere
  const Tensor ids = meta_calls::placeholder(
      meta_calls::spec_of(empty({5}, {.dtype = kInt64, .device = Device::meta(1)})), Device::cpu());
  EXPECT_DOUBLE_EQ(ids.sum().item(), 0.0);  // a valid id, target and index
}
