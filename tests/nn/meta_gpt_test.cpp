// A GPT's training step on the meta device (core/device.h): the same outputs' shapes as on a real
// device, and the bytes it holds counted without computing or storing a value. Beside a step on a
// virtual CPU device: the parameters, their gradients and AdamW's two moments come to the same
// bytes, and so does the peak in float64. In float32 the CPU's peak during backward is 1.3 to
// 2.6 % above meta's (32 or 64 KiB here, varying from run to run, with the backward's device
// threads on or off, packed weights on or off): not yet explained, so held to 3 %.
#include "parallel/drawn_gpt.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using ::testing::HasSubstr;

namespace {

struct StepMemory {
  Shape logits;
  int64_t peak = 0, after = 0;  // above the step's start: at its peak, and once it is done
};

StepMemory training_step(Device d, DType dtype, bool checkpointed) {
  manual_seed(0);
  nn::Sequential model = nn::gpt({.block_size = 32,
                                  .vocab_size = 65,
                                  .n_layer = 2,
                                  .n_head = 4,
                                  .n_embd = 64,
                                  .dropout = 0.1,
                                  .tensor = {.dtype = dtype}});
  if (checkpointed) model = tandem::testing::with_checkpointed_blocks(model);
  const MemoryStats start = memory_stats(d);
  model.to(d);
  optim::AdamW opt(model.parameters(), {.lr = 1e-3, .weight_decay = 0.1});
  const Tensor x = zeros({8, 32}, {.dtype = kInt64, .device = d});
  const Tensor y = zeros({8, 32}, {.dtype = kInt64, .device = d});
  reset_peak_memory_stats(d);
  const Tensor logits = model.forward(x);
  nn::gpt_loss(logits, y).backward();
  opt.step();
  StepMemory out{.logits = logits.shape()};
  out.peak = memory_stats(d).peak_allocated_bytes - start.allocated_bytes;
  out.after = memory_stats(d).allocated_bytes - start.allocated_bytes;
  return out;
}

}  // namespace

TEST(MetaGPT, ATrainingStepHoldsWhatItHoldsOnACpuDevice) {
  for (DType dtype : {kFloat32, kFloat64})
    for (bool checkpointed : {false, true}) {
      const StepMemory cpu = training_step(Device::cpu(9), dtype, checkpointed);
      const StepMemory meta = training_step(Device::meta(9), dtype, checkpointed);
      const std::string what = std::string(name(dtype)) + (checkpointed ? ", checkpointed" : "");
      EXPECT_EQ(meta.logits, cpu.logits) << what;
      EXPECT_EQ(meta.after, cpu.after) << what << ": parameters, gradients, AdamW's moments";
      if (dtype == kFloat64) {
        EXPECT_EQ(meta.peak, cpu.peak) << what << ": the step's peak";
      } else {
        EXPECT_LE(meta.peak, cpu.peak) << what;
        EXPECT_GE(double(meta.peak), 0.97 * double(cpu.peak)) << what << ": the step's peak";
      }
    }
}

TEST(MetaGPT, ValuesAreRefusedNamingTheDevice) {
  nn::Sequential model = nn::gpt({.block_size = 8,
                                  .vocab_size = 11,
                                  .n_layer = 1,
                                  .n_head = 2,
                                  .n_embd = 8,
                                  .tensor = {.dtype = kFloat32}});
  model.to(Device::meta());
  const Tensor x = zeros({2, 8}, {.dtype = kInt64, .device = Device::meta()});
  const Tensor loss = nn::gpt_loss(model.forward(x), x);
  EXPECT_EQ(loss.shape(), (Shape{}));
  EXPECT_THAT(error_message<DeviceError>([&] { loss.item(); }),
              HasSubstr("a meta tensor has a shape and a dtype but no values"));
}
