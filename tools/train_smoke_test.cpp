// tools/train_smoke_test.cpp — end-to-end tests of the `tandem` command, run as a user would run
// it (std::system on the built binary). Each test writes a tiny synthetic IDX dataset (256 train
// / 64 test random 28×28 images) into its own temporary directory, so no download is needed.
// The resume test checks the promise of --resume: bit-identical parameters to a run that was
// never interrupted (cnn-bn, so dropout's generator and batch-norm buffers are covered too).
#include "cli_test_support.h"

namespace {
using namespace tandem;
using namespace tandem::cli_test;

TEST(TrainCommand, HelpExitsZeroAndShowsTheDefaultRecipe) {
  TempDir tmp;
  const Result r = tandem_cli("train --help", tmp / "out.txt");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("--model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Default recipe"), std::string::npos) << r.output;
}

TEST(TrainCommand, MissingDatasetNamesTheDirectoryAndTheFourFiles) {
  TempDir tmp;
  const Result r = tandem_cli("train --dataset /nonexistent --no-progress", tmp / "out.txt");
  EXPECT_NE(r.code, 0);
  for (const char* s : {"/nonexistent", "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << " not in:\n" << r.output;
}

TEST(DevicesCommand, ExitsZeroAndListsTheCpu) {
  TempDir tmp;
  const Result r = tandem_cli("devices", tmp / "out.txt");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("cpu  "), std::string::npos) << r.output;
  // Which kernels the 16-bit types get on this CPU (oneDNN's, or float32 where it lacks them).
  for (const char* line :
       {"float32 matmul: ", "bfloat16 matmul: ", "float16 matmul: ", "float32 convolution: ",
        "bfloat16 convolution: ", "float16 convolution: "})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << " not in:\n" << r.output;
  EXPECT_EQ(tandem_cli("devices --json", tmp / "json.txt").code, 0);
}

TEST(TrainCommand, ShortRunWritesMetricsReportAndCheckpoint) {
  TempDir tmp;
  write_synthetic_dataset(tmp / "data");
  const Result r = tandem_cli("train --dataset " + (tmp / "data").string() +
                                  " --model cnn --epochs 2 --max-steps 3 --no-progress"
                                  " --checkpoint " +
                                  (tmp / "ckpt").string() + " --log-dir " + (tmp / "logs").string(),
                              tmp / "out.txt");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("epoch 2/2: train loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("final test accuracy: "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << "no \\r outside a terminal";

  // 3 steps per epoch, logged every step (~10% of 3), then one eval line per epoch.
  const std::string metrics = read_file(tmp / "logs" / "metrics.jsonl");
  EXPECT_EQ(count(metrics, "\n"), 8) << metrics;
  EXPECT_EQ(count(metrics, "\"split\":\"train\""), 6) << metrics;
  EXPECT_EQ(count(metrics, "\"split\":\"eval\""), 2) << metrics;
  EXPECT_EQ(count(metrics, "\"epoch\":2,\"step\":6,\"split\":\"eval\""), 1) << metrics;

  const std::string report = read_file(tmp / "logs" / "report.html");
  EXPECT_EQ(count(report, "<svg"), 4);
  EXPECT_EQ(count(report, "<script"), 0);
  EXPECT_TRUE(fs::exists(tmp / "ckpt" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(tmp / "ckpt" / "optimizer.safetensors"));
}

TEST(TrainCommand, ResumeIsBitIdenticalToAnUninterruptedRun) {
  TempDir tmp;
  write_synthetic_dataset(tmp / "data");
  // cnn-bn: dropout draws from the generator, batch norm has buffers, augment defaults to 2.
  const std::string common = "train --dataset " + (tmp / "data").string() +
                             " --model cnn-bn --batch-size 32 --max-steps 3 --schedule step"
                             " --no-progress ";
  const Result whole = tandem_cli(common + "--epochs 2 --checkpoint " + (tmp / "a").string() +
                                      " --log-dir " + (tmp / "log-a").string(),
                                  tmp / "a.txt");
  ASSERT_EQ(whole.code, 0) << whole.output;
  const std::string b =
      " --checkpoint " + (tmp / "b").string() + " --log-dir " + (tmp / "log-b").string();
  const Result first = tandem_cli(common + "--epochs 1" + b, tmp / "b1.txt");
  ASSERT_EQ(first.code, 0) << first.output;
  const Result rest = tandem_cli(common + "--epochs 2 --resume" + b, tmp / "b2.txt");
  ASSERT_EQ(rest.code, 0) << rest.output;
  EXPECT_NE(rest.output.find("continuing at epoch 2 of 2"), std::string::npos) << rest.output;
  EXPECT_EQ(rest.output.find("epoch 1/2:"), std::string::npos) << rest.output;
  EXPECT_NE(rest.output.find("epoch 2/2:"), std::string::npos) << rest.output;

  expect_same_tensors(tmp / "a" / "model.safetensors", tmp / "b" / "model.safetensors");
  expect_same_tensors(tmp / "a" / "optimizer.safetensors", tmp / "b" / "optimizer.safetensors");
  // The resumed run appended to the first run's metrics: one eval line per epoch, 1 and 2.
  const std::string metrics = read_file(tmp / "log-b" / "metrics.jsonl");
  EXPECT_EQ(count(metrics, "\"split\":\"eval\""), 2) << metrics;
  EXPECT_EQ(count(metrics, "\"epoch\":2,\"step\":6,\"split\":\"eval\""), 1) << metrics;
}

// Runs of `tandem train --ddp` under `tandem launch` on a synthetic dataset, each with its own
// checkpoint directory: SGD with momentum, whose update does not magnify float32 rounding as
// Adam's division does near zero; no augmentation, whose shifts are drawn per batch of a rank; a
// schedule that does not span --epochs.
struct LaunchedRuns {
  TempDir tmp;
  LaunchedRuns() { write_synthetic_dataset(tmp / "data"); }
  Result run(int ranks, const std::string& name, const std::string& flags,
             const std::string& log = "", bool succeeds = true) {
    const Result r = tandem_cli(
        "launch --standalone --nproc-per-node " + std::to_string(ranks) +
            " -- " TANDEM_CLI " train --dataset " + (tmp / "data").string() +
            " --model mlp --optimizer sgd --batch-size 32 --max-steps 3 --augment 0 --schedule "
            "step --no-progress --ddp" +
            flags + " --checkpoint " + (tmp / name).string() + " --log-dir " +
            (tmp / ("log-" + name)).string(),
        tmp / ((log.empty() ? name : log) + ".txt"));
    if (succeeds) {
      EXPECT_EQ(r.code, 0) << r.output;
    }
    return r;
  }
  // Checkpoint `name`'s model equals `other`'s up to float32 rounding (1 rank sums the batch in
  // another order than 2).
  void expect_close(const std::string& name, const std::string& other) {
    const SafetensorsFile a = load_safetensors((tmp / name / "model.safetensors").string());
    const SafetensorsFile b = load_safetensors((tmp / other / "model.safetensors").string());
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (const auto& [key, t] : a.tensors) {
      const double diff = abs(t - b.at(key)).max().item();
      EXPECT_LT(diff, 1e-4) << other << ": " << key << " differs by " << diff;
    }
  }
};

// --ddp --zero 2 on 2 ranks, checkpointed after epoch 1 and resumed by 1 rank with --zero 1: the
// consolidated checkpoint does not depend on how many ranks wrote it, and the run ends where an
// uninterrupted 2-rank run does.
TEST(TrainCommand, ZeroCheckpointResumesOnAnotherNumberOfRanks) {
  LaunchedRuns runs;
  const Result whole = runs.run(2, "a", " --zero 2 --epochs 2");
  EXPECT_NE(whole.output.find("memory per rank (rank 0, cpu"), std::string::npos) << whole.output;
  runs.run(2, "b", " --zero 2 --epochs 1");
  const Result rest = runs.run(1, "b", " --zero 1 --epochs 2 --resume", "b2");
  EXPECT_NE(rest.output.find("continuing at epoch 2 of 2"), std::string::npos) << rest.output;
  runs.expect_close("a", "b");
}

// --ddp --zero 3 (fully_shard) on 2 ranks trains as DDP does, and its checkpoint (whole tensors,
// gathered to rank 0) resumes on 1 rank, resharded, ending where the uninterrupted run does.
TEST(TrainCommand, Zero3TrainsAsDdpAndResumesOnAnotherNumberOfRanks) {
  LaunchedRuns runs;
  runs.run(2, "d", " --epochs 2");
  const Result whole = runs.run(2, "a", " --zero 3 --epochs 2");
  EXPECT_NE(whole.output.find("ZeRO stage 3"), std::string::npos) << whole.output;
  EXPECT_NE(whole.output.find("memory per rank (rank 0, cpu"), std::string::npos) << whole.output;
  runs.run(2, "b", " --zero 3 --epochs 1");
  const Result rest = runs.run(1, "b", " --zero 3 --epochs 2 --resume", "b2");
  EXPECT_NE(rest.output.find("continuing at epoch 2 of 2"), std::string::npos) << rest.output;
  runs.expect_close("a", "d");
  runs.expect_close("a", "b");

  // The same with --sharded-checkpoint: each of the 2 ranks writes its own rows, and 1 rank
  // resumes from them (reading the rows of both files), ending where the uninterrupted run does.
  runs.run(2, "s", " --zero 3 --sharded-checkpoint --epochs 1");
  const fs::path step = runs.tmp / "s" / "step-3";
  for (const char* file : {"rank-0-of-2.safetensors", "rank-1-of-2.safetensors", "index.json"})
    EXPECT_TRUE(fs::is_regular_file(step / file)) << file;
  EXPECT_EQ(read_file(runs.tmp / "s" / "latest"), "step-3");
  EXPECT_FALSE(fs::exists(runs.tmp / "s" / "model.safetensors"));
  // Any layout of ranks reads it: plain DDP and ZeRO-2 too, each ending where the uninterrupted
  // run does.
  for (const char* other : {"s-ddp", "s-zero2"})
    fs::copy(runs.tmp / "s", runs.tmp / other, fs::copy_options::recursive);
  runs.run(2, "s-ddp", " --epochs 2 --resume");
  runs.run(2, "s-zero2", " --zero 2 --epochs 2 --resume");
  runs.expect_close("a", "s-ddp");
  runs.expect_close("a", "s-zero2");
  // Resumed without the flag: it saves one whole file, and the shards it replaces are gone.
  runs.run(1, "s", " --zero 3 --epochs 2 --resume", "s2");
  EXPECT_FALSE(fs::exists(runs.tmp / "s" / "latest"));
  EXPECT_FALSE(fs::exists(step));
  runs.expect_close("a", "s");
}

// --tp 2 cuts the mlp by its plan (layer1.fc a column layer, layer2.fc a row layer): on 2 ranks
// (dp 1) it trains as 1 rank does; on 4 (dp 2 × tp 2, ZeRO-1 over dp) its checkpoint resumes
// under DDP over 2, ending where an uninterrupted DDP run does. cnn-bn is refused, naming its
// batch norm.
TEST(TrainCommand, TensorParallelMlpTrainsAsOneDeviceAndResumesUnderDdp) {
  LaunchedRuns runs;
  runs.run(1, "one", " --epochs 2");
  const Result tp = runs.run(2, "tp", " --tp 2 --epochs 2");
  EXPECT_NE(tp.output.find("tensor parallel: "), std::string::npos) << tp.output;
  runs.expect_close("tp", "one");
  runs.run(2, "ddp", " --epochs 2");
  runs.run(4, "mesh", " --tp 2 --zero 1 --epochs 1");
  const Result rest = runs.run(2, "mesh", " --epochs 2 --resume", "mesh2");
  EXPECT_NE(rest.output.find("continuing at epoch 2 of 2"), std::string::npos) << rest.output;
  runs.expect_close("mesh", "ddp");
  const Result bn = tandem_cli("launch --standalone --nproc-per-node 2 -- " TANDEM_CLI
                               " train --model cnn-bn --tp 2 --dataset " +
                                   (runs.tmp / "data").string(),
                               runs.tmp / "bn.txt");
  EXPECT_NE(bn.code, 0);
  EXPECT_NE(bn.output.find("the plan does not cut batch norm"), std::string::npos) << bn.output;
}

}  // namespace

// --data-parallel trains the same model as one device: the same data, order and initial weights
// give the same parameters up to float32 rounding (the replicas' gradients are summed in another
// order). cnn-bn is left out: with batch norm, statistics over each half batch differ by design.
TEST(TrainCommand, DataParallelTrainsAsOneDevice) {
  TempDir tmp;
  write_synthetic_dataset(tmp / "data");
  const std::string common = "train --dataset " + (tmp / "data").string() +
                             " --model cnn --batch-size 32 --epochs 2 --max-steps 3 --no-progress";
  const Result one = tandem_cli(common + " --checkpoint " + (tmp / "one").string() + " --log-dir " +
                                    (tmp / "log-one").string(),
                                tmp / "one.txt");
  ASSERT_EQ(one.code, 0) << one.output;
  const Result dp =
      tandem_cli(common + " --data-parallel cpu:0,cpu:1 --checkpoint " + (tmp / "dp").string() +
                     " --log-dir " + (tmp / "log-dp").string(),
                 tmp / "dp.txt");
  ASSERT_EQ(dp.code, 0) << dp.output;
  EXPECT_NE(dp.output.find("DataParallel over cpu:0,cpu:1"), std::string::npos) << dp.output;
  const SafetensorsFile a = load_safetensors((tmp / "one" / "model.safetensors").string());
  const SafetensorsFile b = load_safetensors((tmp / "dp" / "model.safetensors").string());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    const double diff = abs(t - b.at(name)).max().item();
    EXPECT_LT(diff, 1e-4) << name << " differs by " << diff;
  }

  const Result both = tandem_cli(common + " --data-parallel cpu:0,cpu:1 --ddp", tmp / "both.txt");
  EXPECT_NE(both.code, 0);
  EXPECT_NE(both.output.find("choose one"), std::string::npos) << both.output;
  const Result mixed = tandem_cli(common + " --data-parallel cpu:0,cuda:0", tmp / "mixed.txt");
  EXPECT_NE(mixed.code, 0);
  EXPECT_NE(mixed.output.find("cuda"), std::string::npos) << mixed.output;
}

// --pipeline trains the same model as one device, whichever schedule, with or without
// activation checkpointing: the same parameters up to float32 rounding (the micro-batches'
// gradients are summed in another order). It also resumes from a checkpoint, and bad
// combinations are clear errors.
TEST(TrainCommand, PipelineTrainsAsOneDevice) {
  TempDir tmp;
  write_synthetic_dataset(tmp / "data");
  const std::string base = "train --dataset " + (tmp / "data").string() +
                           " --batch-size 32 --epochs 2 --max-steps 3 --no-progress";
  const std::string common = base + " --model cnn";
  auto run = [&](const std::string& name, const std::string& flags) {
    const Result r = tandem_cli(common + flags + " --checkpoint " + (tmp / name).string() +
                                    " --log-dir " + (tmp / ("log-" + name)).string(),
                                tmp / (name + ".txt"));
    EXPECT_EQ(r.code, 0) << r.output;
    return r;
  };
  run("one", "");
  const Result gpipe = run("gpipe", " --pipeline cpu:0,cpu:1 --chunks 5");
  EXPECT_NE(gpipe.output.find("pipeline over cpu:0,cpu:1 (gpipe, 5 chunks; stages of"),
            std::string::npos)
      << gpipe.output;
  run("1f1b",
      " --pipeline cpu:0,cpu:1 --chunks 4 --pipeline-schedule 1f1b "
      "--activation-checkpointing");
  const std::string report = read_file(tmp / "log-1f1b" / "report.html");  // the schedule drawn
  EXPECT_NE(report.find("1f1b, p = 2, m = 4: measured"), std::string::npos);
  EXPECT_NE(report.find("1f1b, p = 2, m = 4: simulated from the step"), std::string::npos);
  const SafetensorsFile a = load_safetensors((tmp / "one" / "model.safetensors").string());
  for (const char* other : {"gpipe", "1f1b"}) {
    const SafetensorsFile b = load_safetensors((tmp / other / "model.safetensors").string());
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (const auto& [name, t] : a.tensors) {
      const double diff = abs(t - b.at(name)).max().item();
      EXPECT_LT(diff, 1e-4) << other << ": " << name << " differs by " << diff;
    }
  }
  // A third epoch resumed from the pipelined checkpoint.
  const Result resumed =
      tandem_cli("train --dataset " + (tmp / "data").string() +
                     " --model cnn --batch-size 32 --epochs 3 --max-steps 3 "
                     "--no-progress --pipeline cpu:0,cpu:1 --chunks 5 "
                     "--resume --checkpoint " +
                     (tmp / "gpipe").string() + " --log-dir " + (tmp / "log-resumed").string(),
                 tmp / "resumed.txt");
  EXPECT_EQ(resumed.code, 0) << resumed.output;

  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {" --pipeline cpu:0,cpu:1 --ddp", "cannot be combined"},
           {" --ddp-hook bf16_compress", "--ddp-hook bf16_compress needs --ddp"},
           {" --ddp --ddp-hook zip", "unknown DDP communication hook 'zip'"},
           {" --zero 2", "--zero 2 needs --ddp"},
           {" --ddp --zero 4", "--zero must be 0, 1, 2 or 3, but got 4"},
           {" --ddp --zero 1 --ddp-hook bf16_compress", "choose one"},
           {" --pipeline cpu:0,cpu:1 --chunks 40", "--chunks 40 is more than --batch-size 32"},
           {" --pipeline cpu:0,cpu:1 --pipeline-schedule zb", "not one of gpipe, 1f1b"},
           {" --pipeline cpu:0,cpu:1 --device cpu:1", "not the first device of --pipeline"}}) {
    const Result bad = tandem_cli(common + flags, tmp / "bad.txt");
    EXPECT_NE(bad.code, 0) << flags;
    EXPECT_NE(bad.output.find(message), std::string::npos) << flags << ": " << bad.output;
  }
  const Result bn = tandem_cli(base + " --pipeline cpu:0,cpu:1", tmp / "bn.txt");  // cnn-bn
  EXPECT_NE(bn.code, 0);
  EXPECT_NE(bn.output.find("batch norm would normalise"), std::string::npos) << bn.output;
}

// --activation-checkpointing recomputes each block in backward: the same parameters, optimizer
// state and batch-norm statistics, bit for bit (cnn-bn: batch norm inside the blocks, dropout).
TEST(TrainCommand, ActivationCheckpointingGivesTheSameBits) {
  TempDir tmp;
  write_synthetic_dataset(tmp / "data");
  const std::string common = "train --dataset " + (tmp / "data").string() +
                             " --model cnn-bn --batch-size 32 --epochs 1 --max-steps 3"
                             " --no-progress";
  const Result plain = tandem_cli(
      common + " --checkpoint " + (tmp / "a").string() + " --log-dir " + (tmp / "log-a").string(),
      tmp / "a.txt");
  ASSERT_EQ(plain.code, 0) << plain.output;
  const Result ac = tandem_cli(common + " --activation-checkpointing --checkpoint " +
                                   (tmp / "b").string() + " --log-dir " + (tmp / "log-b").string(),
                               tmp / "b.txt");
  ASSERT_EQ(ac.code, 0) << ac.output;
  expect_same_tensors(tmp / "a" / "model.safetensors", tmp / "b" / "model.safetensors");
  expect_same_tensors(tmp / "a" / "optimizer.safetensors", tmp / "b" / "optimizer.safetensors");
}

// --amp: bf16 and fp16 train and say so; fp16's gradient scaler shows in the progress lines and
// metrics.jsonl, and its state travels in the checkpoint (a resumed fp16 run is bit-identical).
TEST(TrainCommand, AmpTrainsAndTheScalerStateResumes) {
  TempDir tmp;
  write_synthetic_dataset(tmp / "data");
  const std::string common = "train --dataset " + (tmp / "data").string() +
                             " --model mlp --max-steps 3 --schedule step --no-progress ";
  const Result bf16 = tandem_cli(
      common + "--epochs 1 --amp bf16 --log-dir " + (tmp / "log-bf16").string(), tmp / "bf16.txt");
  ASSERT_EQ(bf16.code, 0) << bf16.output;
  EXPECT_NE(bf16.output.find("autocast bf16"), std::string::npos) << bf16.output;
  EXPECT_EQ(bf16.output.find("gradient scaler"), std::string::npos) << bf16.output;

  const std::string fp16 = common + "--amp fp16 ";
  const Result whole = tandem_cli(fp16 + "--epochs 3 --checkpoint " + (tmp / "a").string() +
                                      " --log-dir " + (tmp / "log-a").string(),
                                  tmp / "a.txt");
  ASSERT_EQ(whole.code, 0) << whole.output;
  EXPECT_NE(whole.output.find("autocast fp16 with a gradient scaler"), std::string::npos);
  EXPECT_NE(whole.output.find(" | scale "), std::string::npos) << whole.output;
  EXPECT_NE(whole.output.find("epoch 3: gradient scaler skipped"), std::string::npos);
  const std::string metrics = read_file(tmp / "log-a" / "metrics.jsonl");
  EXPECT_EQ(count(metrics, "\"loss_scale\":"), 9) << metrics;  // every train record
  EXPECT_EQ(count(metrics, "\"skipped_steps\":"), 9) << metrics;
  const SafetensorsFile opt = load_safetensors((tmp / "a" / "optimizer.safetensors").string());
  ASSERT_TRUE(opt.metadata.count("grad_scaler")) << "the scaler's state is in the checkpoint";

  const std::string b =
      " --checkpoint " + (tmp / "b").string() + " --log-dir " + (tmp / "log-b").string();
  ASSERT_EQ(tandem_cli(fp16 + "--epochs 2" + b, tmp / "b1.txt").code, 0);
  const Result rest = tandem_cli(fp16 + "--epochs 3 --resume" + b, tmp / "b2.txt");
  ASSERT_EQ(rest.code, 0) << rest.output;
  expect_same_tensors(tmp / "a" / "model.safetensors", tmp / "b" / "model.safetensors");
  EXPECT_EQ(
      load_safetensors((tmp / "b" / "optimizer.safetensors").string()).metadata["grad_scaler"],
      opt.metadata.at("grad_scaler"));

  // Through a pipeline: autocast reaches the stage threads, the loss function scales.
  const Result piped = tandem_cli(fp16 + "--epochs 1 --pipeline cpu:0,cpu:1 --chunks 2 --log-dir " +
                                      (tmp / "log-pipe").string(),
                                  tmp / "pipe.txt");
  ASSERT_EQ(piped.code, 0) << piped.output;
  EXPECT_NE(piped.output.find(" | scale "), std::string::npos) << piped.output;

  const Result bad = tandem_cli(common + "--amp fp32", tmp / "bad.txt");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find("--amp fp32 is not one of none, bf16, fp16"), std::string::npos)
      << bad.output;
}

// --cuda-graphs: three eager steps, one capture, then replays, with the last (smaller) batch of
// each epoch run eagerly; the parameters match a run without graphs (to the device pow's last
// bits in Adam's bias corrections). Skipped, visibly, without a GPU.
TEST(TrainCommand, CudaGraphsTrainAsEagerSteps) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  TempDir tmp;
  write_synthetic_dataset(tmp / "data");
  const std::string common = "train --dataset " + (tmp / "data").string() +
                             " --model cnn --batch-size 48 --epochs 2 --schedule none"
                             " --device cuda:0 --no-progress";
  const Result eager = tandem_cli(
      common + " --checkpoint " + (tmp / "a").string() + " --log-dir " + (tmp / "log-a").string(),
      tmp / "a.txt");
  ASSERT_EQ(eager.code, 0) << eager.output;
  const Result graphed = tandem_cli(common + " --cuda-graphs --checkpoint " + (tmp / "b").string() +
                                        " --log-dir " + (tmp / "log-b").string(),
                                    tmp / "b.txt");
  ASSERT_EQ(graphed.code, 0) << graphed.output;
  const SafetensorsFile a = load_safetensors((tmp / "a" / "model.safetensors").string());
  const SafetensorsFile b = load_safetensors((tmp / "b" / "model.safetensors").string());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) EXPECT_LT(abs(t - b.at(name)).max().item(), 1e-5) << name;
}
