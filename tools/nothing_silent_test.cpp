// tools/nothing_silent_test.cpp — `tandem train` and `tandem generate` never fail silently: a flag
// that would do nothing is refused, naming the model; a bad value is a short clear error before
// any work; a resume past the run's end stops at once; a diverged model never replaces a good
// checkpoint and the run ends non-zero; --skip-nonfinite holds for the GPT too; a restart resumes
// from a sharded checkpoint; generate reads shards, and refuses NaN weights. Each case failed
// silently (or hung) before issue 55.
#include <tandem/parallel/fsdp/sharded_checkpoint.h>
#include <cmath>

#include "cli_test_support.h"
#include "gpt_test_support.h"

namespace {
using namespace tandem;
using namespace tandem::cli_test;

// Every case fails (exit != 0) with `message` in its output, and without `absent` (work that must
// not have started, or a misleading word).
struct Refusal {
  std::string args, message, absent;
};

void expect_refused(const std::vector<Refusal>& cases, const TempDir& tmp) {
  for (const auto& [args, message, absent] : cases) {
    const Result r = tandem_cli(args, tmp / "out.txt");
    EXPECT_NE(r.code, 0) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    if (!absent.empty()) {
      EXPECT_EQ(r.output.find(absent), std::string::npos) << args << "\n" << r.output;
    }
  }
}

// "epoch" of a checkpoint file's metadata.
std::string saved_epoch(const fs::path& file) {
  return load_safetensors(file.string()).metadata.at("epoch");
}

TEST(NothingSilent, FlagsThatDoNothingAndBadValuesAreRefusedBeforeAnyWork) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  write_synthetic_dataset(tmp / "data");
  std::ofstream(tmp / "a-file") << "x";
  const std::string gpt = gpt_flags(tmp / "text.txt", 5) + " --log-dir " + (tmp / "l").string();
  const std::string cnn = "train --model cnn --no-progress --max-steps 2 --dataset " +
                          (tmp / "data").string() + " --log-dir " + (tmp / "l").string();
  expect_refused(
      {{gpt + " --epochs 3", "--epochs does not apply to --model gpt", ""},
       {gpt + " --max-steps 3", "--max-steps does not apply to --model gpt", ""},
       {gpt + " --dataset fashion-mnist", "--dataset does not apply to --model gpt", ""},
       {gpt + " --momentum 0.5", "--momentum does not apply to --model gpt", ""},
       {cnn + " --text x.txt", "--text does not apply to --model cnn", ""},
       {cnn + " --max-iters 9", "--max-iters does not apply to --model cnn", ""},
       {cnn + " --momentum 0.5", "--momentum is SGD's; --optimizer adam does not use it", ""},
       {cnn + " --chunks 4", "--chunks describes a pipeline", ""},
       {gpt + " --seed -1", "--seed: must be >= 0, but is -1", ""},
       {gpt + " --lr 0", "--lr: must be > 0, but is 0", "e+308"},
       {cnn + " --epochs 0", "--epochs: must be > 0, but is 0", "e+308"},
       {cnn + " --batch-size 0", "--batch-size: must be > 0, but is 0", "e+308"},
       {gpt + " --n-head 0", "--n-head: must be > 0, but is 0", "e+308"},
       {gpt_flags(tmp / ".", 5), "is a directory, not a text file", "the text is empty"},
       {gpt + " --tp 2 --pipeline cpu:0,cpu:1", "--pipeline cannot be combined with --tp 2",
        "--ddp"},
       // An unwritable checkpoint directory: found at the start, not after the first evaluation.
       {gpt + " --checkpoint " + (tmp / "a-file").string(), "cannot create the directory",
        "step 0:"},
       {gpt + " --checkpoint /proc/nope", "--checkpoint /proc/nope", "step 0:"},
       {cnn + " --checkpoint " + (tmp / "a-file" / "ckpt").string(), "cannot create the directory",
        "epoch 1/"}},
      tmp);
}

TEST(NothingSilent, ShortGptRunClampsTheDefaultWarmUpAndNamesTheLogAfterTheCorpus) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  const Result r = tandem_cli("train --model gpt --text " + (tmp / "text.txt").string() +
                                  " --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 "
                                  "--batch-size 8 --max-iters 20 --eval-iters 2",
                              tmp / "out.txt");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("warming up over 19 iterations instead"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("logs in runs/gpt-text"), std::string::npos) << r.output;
  fs::remove_all("runs/gpt-text");
}

TEST(NothingSilent, AResumePastTheRunsEndStopsAtOnce) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  const std::string ckpt = " --checkpoint " + (tmp / "ckpt").string();
  auto run = [&](int iters, const std::string& extra) {  // before: the past one never ended
    return tandem_cli(
        gpt_flags(tmp / "text.txt", iters, {{"--log-dir", (tmp / "l").string()}}) + ckpt + extra,
        tmp / "out.txt");
  };
  ASSERT_EQ(run(10, "").code, 0);
  const Result past = run(5, " --resume");
  EXPECT_NE(past.code, 0) << past.output;
  EXPECT_NE(past.output.find("is at iteration 10, past --max-iters 5"), std::string::npos)
      << past.output;
  const Result done = run(10, " --resume");
  EXPECT_EQ(done.code, 0) << done.output;
  EXPECT_NE(done.output.find("has finished all 10 iterations"), std::string::npos) << done.output;

  write_synthetic_dataset(tmp / "data");
  const std::string cnn = "train --model cnn --no-progress --max-steps 2 --dataset " +
                          (tmp / "data").string() + " --checkpoint " + (tmp / "c").string() +
                          " --log-dir " + (tmp / "l").string();
  ASSERT_EQ(tandem_cli(cnn + " --epochs 2", tmp / "out.txt").code, 0);
  const Result back = tandem_cli(cnn + " --epochs 1 --resume", tmp / "out.txt");
  EXPECT_NE(back.code, 0) << back.output;
  EXPECT_NE(back.output.find("is after epoch 2, past --epochs 1"), std::string::npos)
      << back.output;
}

// --lr 1e30 sends the weights to about 1e29: finite, so only the evaluation shows the damage.
TEST(NothingSilent, ADivergedModelNeverReplacesAGoodCheckpoint) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  const std::string gpt =
      gpt_flags(
          tmp / "text.txt", 20,
          {{"--log-dir", (tmp / "l").string()}, {"--eval-interval", "10"}, {"--lr", "1e30"}}) +
      " --skip-nonfinite";
  const Result skips = tandem_cli(gpt, tmp / "out.txt");  // LayerNorm keeps its loss finite
  EXPECT_EQ(skips.code, 0) << skips.output;
  EXPECT_NE(skips.output.find("step skipped"), std::string::npos)
      << "the GPT honours --skip-nonfinite (before: it stopped at the first NaN)\n"
      << skips.output;
  EXPECT_NE(skips.output.find("steps skipped: loss or gradients not finite"), std::string::npos)
      << skips.output;

  write_synthetic_dataset(tmp / "data");
  const std::string cnn = "train --model cnn --no-progress --max-steps 2 --dataset " +
                          (tmp / "data").string() + " --checkpoint " + (tmp / "c").string() +
                          " --log-dir " + (tmp / "l").string();
  ASSERT_EQ(tandem_cli(cnn + " --epochs 1", tmp / "out.txt").code, 0);
  const Result image =
      tandem_cli(cnn + " --epochs 2 --resume --lr 1e30 --skip-nonfinite", tmp / "out.txt");
  EXPECT_NE(image.code, 0) << image.output;
  EXPECT_NE(image.output.find("the model diverged"), std::string::npos) << image.output;
  EXPECT_EQ(saved_epoch(tmp / "c" / "model.safetensors"), "1");
}

// `tandem launch --max-restarts` sets TANDEM_RESTART_COUNT; a restarted rank resumes from the
// newest checkpoint of either kind (before, it looked for model.safetensors only and started
// over from iteration 0 beside a sharded checkpoint, then replaced it).
TEST(NothingSilent, ARestartResumesFromAShardedCheckpointAndGenerateReadsIt) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  const std::string run =
      "launch --standalone --nproc-per-node 2 -- " + std::string(TANDEM_CLI) + " " +
      gpt_flags(tmp / "text.txt", 20, {{"--log-dir", (tmp / "l").string()}}) +
      " --ddp --zero 3 --sharded-checkpoint --checkpoint " + (tmp / "ckpt").string();
  ASSERT_EQ(tandem_cli(run, tmp / "out.txt").code, 0);
  ASSERT_TRUE(parallel::is_sharded_checkpoint((tmp / "ckpt").string()));
  const Result again = tandem_cli(
      "launch --standalone --nproc-per-node 2 -- env "
      "TANDEM_RESTART_COUNT=1 " +
          run.substr(run.find(" -- ") + 4),
      tmp / "again.txt");
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("has finished all 20 iterations"), std::string::npos) << again.output;

  const Result text = tandem_cli(
      "generate --checkpoint " + (tmp / "ckpt").string() + " --tokens 20 --prompt The --top-k 5",
      tmp / "gen.txt");
  EXPECT_EQ(text.code, 0) << text.output;
  EXPECT_EQ(text.output.size(), 3 + 20 + 1u) << text.output;
}

TEST(NothingSilent, GenerateRefusesNaNWeightsATopKPastTheVocabularyAndSurvivesTinyTemperatures) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  ASSERT_EQ(tandem_cli(gpt_flags(tmp / "text.txt", 5, {{"--log-dir", (tmp / "l").string()}}) +
                           " --checkpoint " + (tmp / "ckpt").string(),
                       tmp / "out.txt")
                .code,
            0);
  const std::string gen = "generate --tokens 10 --prompt The --checkpoint ";
  const Result cold =
      tandem_cli(gen + (tmp / "ckpt").string() + " --temperature 1e-300", tmp / "o.txt");
  EXPECT_EQ(cold.code, 0) << cold.output;
  EXPECT_EQ(cold.output.find("nan"), std::string::npos) << cold.output;
  expect_refused({{gen + (tmp / "ckpt").string() + " --top-k 500", "--top-k 500 is more than", ""}},
                 tmp);

  // A NaN planted in one attention weight: before, the fused attention turned it into zeros and
  // generate printed plausible text.
  SafetensorsFile file = load_safetensors((tmp / "ckpt" / "model.safetensors").string());
  for (auto& [name, t] : file.tensors)
    if (name == "transformer.h.0.attn.c_attn.weight") {
      t = t.clone();
      t.view({-1}).narrow(0, 0, 1).fill_(std::nan(""));
    }
  fs::create_directories(tmp / "nan");
  save_safetensors((tmp / "nan" / "model.safetensors").string(), file.tensors, file.metadata);
  expect_refused({{gen + (tmp / "nan").string(), "holds NaN or inf", ""}}, tmp);
}

// A checkpoint of a vocabulary that --tp 2 cannot split (the text's characters, an odd count)
// resumes under --tp 2 (before: a raw shape mismatch [65, 64] vs [33, 64]): the run pads the
// table for its layout with rows the model never reads, and its checkpoint holds the unpadded
// table again, which one device resumes as it is.
TEST(NothingSilent, AnOddVocabularyResumesUnderTensorParallelism) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  std::ofstream(tmp / "text.txt", std::ios::app) << "!";  // one more character: an odd count
  const auto flags = [&](int iters) {
    return gpt_flags(tmp / "text.txt", iters, {{"--log-dir", (tmp / "l").string()}}) +
           " --checkpoint " + (tmp / "ckpt").string();
  };
  ASSERT_EQ(tandem_cli(flags(10), tmp / "out.txt").code, 0);
  const auto rows = [&] {
    return load_safetensors((tmp / "ckpt" / "model.safetensors").string())
        .at("transformer.wte.weight")
        .size(0);
  };
  const int64_t characters = rows();
  ASSERT_EQ(characters % 2, 1) << "the test needs an odd vocabulary";
  const Result tp = tandem_cli("launch --standalone --nproc-per-node 2 -- " +
                                   std::string(TANDEM_CLI) + " " + flags(20) + " --resume --tp 2",
                               tmp / "tp.txt");
  ASSERT_EQ(tp.code, 0) << tp.output;
  EXPECT_NE(tp.output.find("resuming from"), std::string::npos) << tp.output;
  EXPECT_NE(tp.output.find("(padded to " + std::to_string(characters + 1) + ")"), std::string::npos)
      << tp.output;
  EXPECT_EQ(rows(), characters) << "a checkpoint holds the unpadded table";
  const Result one = tandem_cli(flags(30) + " --resume", tmp / "one.txt");
  EXPECT_EQ(one.code, 0) << one.output;
}

}  // namespace

// The same through a sharded checkpoint, which holds the table as the run pads it: saved with no
// tensor parallelism (before: 21 rows), it resumes under --tp 2 and back under ZeRO-3 (rows that
// every tensor-parallel size divides, whatever the saving layout).
TEST(NothingSilent, AnOddVocabularysShardedCheckpointResumesUnderAnyLayout) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  std::ofstream(tmp / "text.txt", std::ios::app) << "!";  // an odd count of characters
  const std::string two = "launch --standalone --nproc-per-node 2 -- " + std::string(TANDEM_CLI);
  const auto run = [&](int iters, const std::string& extra, const std::string& log) {
    return tandem_cli(
        two + " " + gpt_flags(tmp / "text.txt", iters, {{"--log-dir", (tmp / log).string()}}) +
            " --checkpoint " + (tmp / "ckpt").string() + extra,
        tmp / (log + ".txt"));
  };
  const Result saved = run(10, " --ddp --zero 3 --sharded-checkpoint", "a");
  ASSERT_EQ(saved.code, 0) << saved.output;
  const Shape rows =
      parallel::sharded_checkpoint_shape((tmp / "ckpt").string(), "transformer.wte.weight");
  EXPECT_EQ(rows[0] % 2, 0) << "the table splits over every tensor-parallel size";
  const Result tp = run(20, " --tp 2 --sharded-checkpoint --resume", "b");
  ASSERT_EQ(tp.code, 0) << tp.output;
  EXPECT_NE(tp.output.find("resuming from"), std::string::npos) << tp.output;
  const Result back = run(30, " --ddp --zero 3 --resume", "c");
  EXPECT_EQ(back.code, 0) << back.output;
}
