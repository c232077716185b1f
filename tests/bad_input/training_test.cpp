// tests/bad_input/training_test.cpp — the bad-input table, part 2: `tandem train` run as a user
// runs it. Resuming from a half-written or interrupted checkpoint, a loss that turns NaN (it
// stops naming the step, or skips under --skip-nonfinite, and never saves NaN over a good
// checkpoint, in the parameters or in batch norm's statistics), a dataset whose image and
// label counts differ, --cuda-graphs with what a replayed step cannot hold, and
// --flash-attention off CUDA.
#include <cmath>
#include <filesystem>

#include "bad_input/bad_input.h"

namespace tandem::bad_input {
namespace {
namespace fs = std::filesystem;
using testing::read_bytes;
using testing::write_bytes;

// A small run on a tiny dataset (the mlp and SGD unless `extra` names others); `extra` adds flags.
Outcome train(const TempDir& d, const std::string& ckpt, const std::string& extra) {
  const std::string optimizer =
      extra.find("--optimizer") == std::string::npos ? "--optimizer sgd " : "";
  const std::string model = extra.find("--model") == std::string::npos ? "--model mlp " : "";
  // The GPT reads a text, not images: --dataset, --max-steps and --no-progress are refused there.
  const std::string data = extra.find("--model gpt") != std::string::npos
                               ? "--max-iters 2"
                               : "--dataset '" + d.file("data") + "' --max-steps 4 --no-progress";
  return tandem_cli(d, "train " + model + optimizer + data + " --batch-size 16 --log-dir '" +
                           d.file("runs") + "' --checkpoint '" + d.file(ckpt) + "' " + extra);
}

// A dataset and a checkpoint after `epochs` good epochs in d/<ckpt>.
void trained(const TempDir& d, const std::string& ckpt = "ckpt", int epochs = 1,
             const std::string& extra = "") {
  if (!fs::exists(d.file("data"))) {
    fs::create_directories(d.file("data"));
    write_dataset(d.file("data"), 64);
  }
  const Outcome o = train(d, ckpt, "--epochs " + std::to_string(epochs) + " " + extra);
  ASSERT_EQ(o.error, "exit 0") << o.message;
}

// Keeps a copy of d/ckpt's files, to compare after the failure.
void snapshot(const TempDir& d) {
  fs::copy(d.file("ckpt"), d.file("before"), fs::copy_options::recursive);
}
void unchanged(const TempDir& d) {
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(read_bytes(d.file(std::string("ckpt/") + f)),
              read_bytes(d.file(std::string("before/") + f)))
        << f << " changed";
}

const Row kTrainRows[] = {
    {"ResumeFromATruncatedModelFile",
     [](const TempDir& d) {
       trained(d);
       fs::resize_file(d.file("ckpt/model.safetensors"), 100);
       snapshot(d);
       return train(d, "ckpt", "--epochs 2 --resume");
     },
     "exit 1",
     {"{dir}/ckpt/model.safetensors", "truncated"},
     unchanged},
    {"ResumeWithTheOptimizerFileMissing",
     [](const TempDir& d) {
       trained(d);
       fs::remove(d.file("ckpt/optimizer.safetensors"));
       return train(d, "ckpt", "--epochs 2 --resume");
     },
     "exit 1",
     {"{dir}/ckpt/optimizer.safetensors does not exist"}},
    {"ResumeAfterACrashBetweenTheTwoRenames",
     [](const TempDir& d) {
       // The new model (epoch 2) is in place; its optimizer waits as optimizer.safetensors.next
       // beside the old one (epoch 1): what a crash between save_checkpoint's renames leaves.
       trained(d, "ckpt", 1);
       trained(d, "ckpt2", 2);
       fs::copy_file(d.file("ckpt2/model.safetensors"), d.file("ckpt/model.safetensors"),
                     fs::copy_options::overwrite_existing);
       fs::copy_file(d.file("ckpt2/optimizer.safetensors"),
                     d.file("ckpt/optimizer.safetensors.next"));
       return train(d, "ckpt", "--epochs 3 --resume");
     },
     "exit 0",
     {"after epoch 2", "continuing at epoch 3"},
     [](const TempDir& d) { EXPECT_FALSE(fs::exists(d.file("ckpt/optimizer.safetensors.next"))); }},
    {"ResumeWithAnotherOptimizer",
     [](const TempDir& d) {
       trained(d);  // SGD
       snapshot(d);
       return train(d, "ckpt", "--epochs 2 --resume --optimizer adam");
     },
     "exit 1",
     {"{dir}/ckpt/optimizer.safetensors", "do not fit this optimizer", "another optimizer"},
     unchanged},
    {"NanLossStopsNamingTheStep",
     [](const TempDir& d) {
       trained(d);
       snapshot(d);
       return train(d, "ckpt", "--epochs 2 --resume --lr 1e30");
     },
     "exit 1",
     {"train: the loss is", "at epoch 2, step", "--skip-nonfinite"},
     unchanged},
    // The skipped steps leave finite weights whose evaluation is NaN: a diverged model, which
    // must not replace the good checkpoint (it once did, and the run ended with exit 0).
    {"NanLossIsSkippedWithTheFlagAndADivergedModelIsNotSaved",
     [](const TempDir& d) {
       trained(d);
       snapshot(d);
       return train(d, "ckpt", "--epochs 2 --resume --lr 1e30 --skip-nonfinite");
     },
     "exit 1",
     {"step skipped", "the model diverged: its evaluation loss is", "was not replaced"},
     unchanged},
    {"NanBatchNormStatisticsNeverReplaceAGoodCheckpoint",
     [](const TempDir& d) {
       // A diverging lr: the first step makes the weights huge but finite, the forwards after it
       // overflow, and their losses are skipped; batch norm's running statistics, updated by
       // those forwards, turn NaN while every parameter stays finite.
       trained(d, "ckpt", 1, "--model cnn-bn");
       snapshot(d);
       return train(d, "ckpt", "--model cnn-bn --epochs 2 --resume --lr 1e30 --skip-nonfinite");
     },
     "exit 1",
     {"the model diverged", "after epoch 2", "was not replaced"},
     unchanged},
    {"DatasetImageAndLabelCountsDiffer",
     [](const TempDir& d) {
       fs::create_directories(d.file("data"));
       write_dataset(d.file("data"), 32, /*labels=*/30);
       return train(d, "ckpt", "--epochs 1");
     },
     "exit 1",
     {"size mismatch", "{dir}/data/train-images-idx3-ubyte holds 32 images",
      "train-labels-idx1-ubyte holds 30 labels"},
     [](const TempDir& d) { EXPECT_FALSE(fs::exists(d.file("ckpt/model.safetensors"))); }},
    // --cuda-graphs replays one captured step: what changes between steps cannot be in it.
    {"CudaGraphsWithDropout",
     [](const TempDir& d) { return train(d, "ckpt", "--model cnn-bn --cuda-graphs"); },
     "exit 1",
     {"--cuda-graphs needs --model mlp or cnn", "dropout"},
     [](const TempDir&) {}},
    {"CudaGraphsWithALearningRateSchedule",
     [](const TempDir& d) { return train(d, "ckpt", "--cuda-graphs --schedule cosine"); },
     "exit 1",
     {"--cuda-graphs needs --schedule none", "cosine"},
     [](const TempDir&) {}},
    {"CudaGraphsWithFloat16AndSgd",
     [](const TempDir& d) {
       return train(d, "ckpt", "--cuda-graphs --schedule none --amp fp16");  // SGD: train()'s
     },
     "exit 1",
     {"--cuda-graphs --amp fp16 needs --optimizer adam or adamw"},
     [](const TempDir&) {}},
    {"CudaGraphsOnTheCpu",
     [](const TempDir& d) {
       fs::create_directories(d.file("data"));
       write_dataset(d.file("data"), 32);
       return train(d, "ckpt", "--cuda-graphs --schedule none --device cpu");
     },
     "exit 1",
     {"--cuda-graphs needs a CUDA device", "not cpu"},
     [](const TempDir&) {}},
    {"FlashAttentionOnTheCpu",
     [](const TempDir& d) {
       return train(d, "ckpt", "--model gpt --optimizer adamw --flash-attention --amp bf16");
     },
     "exit 1",
     {"--flash-attention runs attention on CUDA's tensor cores", "not --device cpu --amp bf16"},
     [](const TempDir&) {}},
};

class Training : public ::testing::TestWithParam<Row> {};
TEST_P(Training, GivesAClearErrorAndLosesNothing) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(BadInput, Training, ::testing::ValuesIn(kTrainRows), row_name);

}  // namespace
}  // namespace tandem::bad_input
