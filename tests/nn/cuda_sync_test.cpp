// No hidden host syncs on cuda:0: a GPT training step (embedding, attention, cross entropy with
// ignored targets, backward, AdamW) runs under SyncDebugMode::Error, and so does a float16 step
// with a GradScaler, skipped or not; the syncs that remain are the
// ones asked for (item(), copies to the host), and those are reported; bad indices found by a
// kernel surface as the CPU's IndexError at the next sync point. Skipped, visibly, without a GPU.
#include <cmath>
#include <limits>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using ::testing::HasSubstr;

namespace {

class CudaSync : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  }
  void TearDown() override { cuda::set_sync_debug_mode(cuda::SyncDebugMode::Off); }
  const Device gpu = Device::cuda(0);

  // A two-layer GPT of 32 tokens on cuda:0, and a batch of 4 × 16 tokens (targets at -1 where
  // `ignore`, whose count must stay on the GPU).
  nn::Sequential tiny_gpt(double dropout) {
    nn::Sequential model = nn::gpt({.block_size = 16,
                                    .vocab_size = 32,
                                    .n_layer = 2,
                                    .n_head = 2,
                                    .n_embd = 32,
                                    .dropout = dropout,
                                    .tensor = {.dtype = kFloat32}});
    model.to(gpu);
    return model;
  }
  std::pair<Tensor, Tensor> batch(bool ignore) {
    std::vector<int64_t> xs(64), ys(64);
    for (int64_t i = 0; i < 64; ++i) {
      xs[size_t(i)] = (i * 7 + 3) % 32;
      ys[size_t(i)] = ignore && i % 16 < 3 ? -1 : (i * 5 + 1) % 32;
    }
    return {from_vector(xs, {4, 16}).to(gpu), from_vector(ys, {4, 16}).to(gpu)};
  }
};

TEST_F(CudaSync, AGptTrainingStepNeverWaitsForTheGpu) {
  manual_seed(5);
  nn::Sequential model = tiny_gpt(0.1);
  optim::AdamW opt(model.parameters(), {.lr = 1e-3});
  const auto [x, y] = batch(/*ignore=*/true);  // (not captured by a lambda: clang refuses)
  cuda::synchronize(0);
  const int64_t before = cuda::host_syncs();
  cuda::set_sync_debug_mode(cuda::SyncDebugMode::Error);
  Tensor loss;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    loss = nn::gpt_loss(model(x), y);
    loss.backward();
    opt.step();
  }
  EXPECT_EQ(cuda::host_syncs(), before) << "a training step made the host wait";
  // Reading the loss is a sync the caller asked for: reported, and under Error refused.
  EXPECT_THAT(error_message<CudaError>([&] { (void)loss.item(); }),
              HasSubstr("a copy from cuda to the host"));
  cuda::set_sync_debug_mode(cuda::SyncDebugMode::Warn);
  EXPECT_TRUE(std::isfinite(loss.item()));
  EXPECT_EQ(cuda::host_syncs(), before + 2);
}

// clip_grad_norm_ returns the norm as a double: one wait for the GPU, not one per gradient.
TEST_F(CudaSync, ClippingTheGradientNormWaitsOnceNotOncePerParameter) {
  manual_seed(5);
  nn::Sequential model = tiny_gpt(0.0);
  const auto [x, y] = batch(/*ignore=*/false);
  nn::gpt_loss(model(x), y).backward();
  ASSERT_GT(model.parameters().size(), size_t(10));
  cuda::synchronize(0);
  const int64_t before = cuda::host_syncs();
  EXPECT_GT(optim::clip_grad_norm_(model.parameters(), 0.5), 0.0);
  EXPECT_EQ(cuda::host_syncs(), before + 1);
}

// float16 training as `tandem train --amp fp16` does it: autocast, a GradScaler and AdamW. The
// scale, the found-inf flag and Adam's step counts stay on the GPU, so neither a good step nor a
// skipped one (an inf planted in a gradient) waits for it.
TEST_F(CudaSync, AFloat16StepWithAGradScalerNeverWaitsForTheGpu) {
  manual_seed(6);
  nn::Sequential model = tiny_gpt(0.0);
  optim::AdamW opt(model.parameters(), {.lr = 1e-3});
  optim::GradScaler scaler;
  const std::pair<Tensor, Tensor> xy = batch(/*ignore=*/false);
  const Tensor &x = xy.first, &y = xy.second;
  auto step = [&](bool plant_inf) {
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(DeviceType::CUDA, kFloat16);
      loss = nn::gpt_loss(model(x), y);
    }
    scaler.scale(loss).backward();
    if (plant_inf) {
      NoGradGuard no_grad;
      opt.parameters().back().grad().fill_(std::numeric_limits<double>::infinity());
    }
    scaler.step(opt);
    scaler.update();
  };
  step(false);  // the first moves the scaler's state to the GPU (copies from the host)
  cuda::synchronize(0);
  const std::vector<double> before = values(opt.parameters().front());
  const int64_t syncs = cuda::host_syncs();
  cuda::set_sync_debug_mode(cuda::SyncDebugMode::Error);
  step(true);
  cuda::set_sync_debug_mode(cuda::SyncDebugMode::Off);
  EXPECT_EQ(cuda::host_syncs(), syncs) << "a skipped step made the host wait";
  EXPECT_EQ(values(opt.parameters().front()), before) << "the skipped step changed a parameter";
  EXPECT_TRUE(scaler.last_step_skipped());
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  const int64_t syncs_after = cuda::host_syncs();
  cuda::set_sync_debug_mode(cuda::SyncDebugMode::Error);
  step(false);
  step(false);
  cuda::set_sync_debug_mode(cuda::SyncDebugMode::Off);
  EXPECT_EQ(cuda::host_syncs(), syncs_after) << "a good step made the host wait";
  EXPECT_NE(values(opt.parameters().front()), before);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

TEST_F(CudaSync, ABadTargetIsTheCpusIndexErrorAtTheNextSync) {
  Tensor logits = randn({6, 10}).to(gpu);
  Tensor target = from_vector<int64_t>({1, 2, 3, 12, 4, 5}, {6}).to(gpu);
  cuda::synchronize(0);
  Tensor loss;
  cuda::set_sync_debug_mode(cuda::SyncDebugMode::Error);
  EXPECT_NO_THROW(loss = cross_entropy(logits, target)) << "no wait at the call";
  cuda::set_sync_debug_mode(cuda::SyncDebugMode::Off);
  EXPECT_GE(cuda::deferred_checks(0), 1u);
  EXPECT_THAT(error_message<IndexError>([&] { (void)loss.item(); }),
              HasSubstr("cross_entropy: target value 12 at index 3 is out of range [0, 10)"));
  EXPECT_EQ(cuda::deferred_checks(0), 0u);
  // The context is still usable, unlike after a device-side assert.
  EXPECT_EQ(values(full({3}, 2.0, {.device = gpu}).sum()), std::vector<double>{6.0});
}

TEST_F(CudaSync, ABadEmbeddingIdSurfacesAtSynchronize) {
  Tensor table = randn({5, 4}).to(gpu);
  Tensor ids = from_vector<int64_t>({0, 4, 9, 1}, {4}).to(gpu);
  Tensor rows = embedding(table, ids);
  EXPECT_THAT(error_message<IndexError>([] { cuda::synchronize(0); }),
              HasSubstr("embedding: id 9 at position 2 is out of range for a table of 5 rows"));
}

TEST_F(CudaSync, PendingIndexChecksStayBoundedWithoutASync) {
  Tensor logits = randn({8, 4}).to(gpu);
  Tensor target = from_vector<int64_t>({0, 1, 2, 3, 0, 1, 2, 3}, {8}).to(gpu);
  for (int i = 0; i < 500; ++i) (void)cross_entropy(logits, target);
  EXPECT_LE(cuda::deferred_checks(0), 4097u);
  cuda::synchronize(0);
  EXPECT_EQ(cuda::deferred_checks(0), 0u);
}

TEST_F(CudaSync, FreeingPinnedMemoryNeverWaitsForTheDevice) {
  Tensor host = arange(0, 1 << 16, 1, {.dtype = kFloat32});
  const size_t cached = cuda::pinned_cache_bytes();
  Tensor dev;
  cuda::set_sync_debug_mode(cuda::SyncDebugMode::Error);
  {
    Tensor pinned = cuda::pin_memory(host);
    cuda::NonBlockingCopies async;
    dev = pinned.to(gpu);  // non-blocking from pinned memory: no wait
  }                        // the copy keeps its source alive until it is done
  {
    Tensor pinned = cuda::pin_memory(host);
  }  // freed: back to the cache, not to cudaFreeHost (which waits for the device)
  cuda::set_sync_debug_mode(cuda::SyncDebugMode::Off);
  EXPECT_GE(cuda::pinned_cache_bytes(), cached + (size_t(1) << 18));
  EXPECT_EQ(values(dev.to(Device::cpu())), values(host));
  cuda::empty_pinned_cache();
  EXPECT_EQ(cuda::pinned_cache_bytes(), 0u);
}

}  // namespace
