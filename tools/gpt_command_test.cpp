// tools/gpt_command_test.cpp — `tandem train --model gpt` and `tandem generate` as a user runs
// them, on a small text the test writes (about 24 KB of sentences from a few words, so that a few
// dozen iterations of a tiny GPT learn something). A run learns, logs, reports and checkpoints;
// generate continues a prompt from the checkpoint, reproducibly per seed; a resumed run is
// bit-identical to one never interrupted; DataParallel, a pipeline (the tied embedding on both
// end stages), activation checkpointing and DDP under `tandem launch` train the same model as one
// device up to float32 rounding, and so does tensor parallelism (alone and on a data × tensor
// mesh), whose checkpoints resume at any size; so does every pipeline schedule (interleaved,
// zero-bubble, DualPipeV) composed with dp, tp and ZeRO; bad input is a clear error.
#include <map>
#include <tuple>

#include "cli_test_support.h"
#include "gpt_test_support.h"

namespace {
using namespace tandem;
using namespace tandem::cli_test;

TEST(GptCommand, TrainsLogsCheckpointsAndGenerates) {
  TempDir tmp;
  write_text(tmp / "text.txt", 600);
  const Result run =
      tandem_cli(gpt_flags(tmp / "text.txt", 60) + " --checkpoint " + (tmp / "ckpt").string() +
                     " --log-dir " + (tmp / "log").string(),
                 tmp / "train.txt");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("tandem train: gpt, 1 layers, 2 heads, 16 wide, context 16"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("iter 60: loss "), std::string::npos) << run.output;
  const double first = val_loss_at(run.output, 0), last = val_loss_at(run.output, 60);
  ASSERT_GT(first, 0) << run.output;
  ASSERT_GT(last, 0) << run.output;
  EXPECT_LT(last, first - 0.5) << "60 iterations learn the words' letters\n" << run.output;
  EXPECT_EQ(count(read_file(tmp / "log" / "metrics.jsonl"), "\"split\":\"eval\""), 4);
  const std::string report = read_file(tmp / "log" / "report.html");
  EXPECT_NE(report.find("final validation loss"), std::string::npos);
  EXPECT_NE(report.find("tokens / s"), std::string::npos);

  // The checkpoint carries the vocabulary and the sizes: generate needs nothing else.
  const std::string gen = "generate --checkpoint " + (tmp / "ckpt").string() + " --tokens 60";
  const Result a = tandem_cli(gen + " --prompt 'The cat' --seed 5", tmp / "a.txt");
  const Result b = tandem_cli(gen + " --prompt 'The cat' --seed 5", tmp / "b.txt");
  const Result c = tandem_cli(gen + " --prompt 'The cat' --seed 6 --top-k 3", tmp / "c.txt");
  ASSERT_EQ(a.code, 0) << a.output;
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_EQ(a.output.rfind("The cat", 0), 0u) << a.output;
  EXPECT_EQ(a.output.size(), 7 + 60 + 1u) << a.output;  // prompt, 60 ASCII characters, newline
  EXPECT_EQ(a.output, b.output) << "the same seed draws the same text";
  const std::string corpus = read_file(tmp / "text.txt");
  for (char ch : a.output.substr(7, 60))
    EXPECT_NE(corpus.find(ch), std::string::npos) << "'" << ch << "' is not in the corpus";
  const Result greedy = tandem_cli(gen + " --prompt The --temperature 0", tmp / "g.txt");
  EXPECT_EQ(greedy.code, 0) << greedy.output;

  // Clear errors: a character the corpus never had, a checkpoint that is not a GPT's, none.
  const Result unknown = tandem_cli(gen + " --prompt 'The Zebra'", tmp / "z.txt");
  EXPECT_NE(unknown.code, 0);
  EXPECT_NE(unknown.output.find("the character 'Z' at position 4 is not in the model's vocabulary"),
            std::string::npos)
      << unknown.output;
  fs::create_directories(tmp / "mlp");
  nn::Linear fc(2, 2);
  nn::save_model((tmp / "mlp" / "model.safetensors").string(), fc);
  const Result other = tandem_cli("generate --checkpoint " + (tmp / "mlp").string(), tmp / "o.txt");
  EXPECT_NE(other.code, 0);
  EXPECT_NE(other.output.find("not a checkpoint of `tandem train --model gpt`"), std::string::npos)
      << other.output;
  const Result none =
      tandem_cli("generate --checkpoint " + (tmp / "nothing").string(), tmp / "n.txt");
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.output.find("does not exist"), std::string::npos) << none.output;
}

// --resume continues as if never stopped: 10 iterations, then 10 more from the checkpoint, give
// the bits of 20 at once (--schedule none: the cosine schedule's length is --max-iters itself).
TEST(GptCommand, ResumeIsBitIdenticalToAnUninterruptedRun) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  const auto run = [&](int iters, const std::string& dir, const std::string& extra) {
    const Result r = tandem_cli(gpt_flags(tmp / "text.txt", iters,
                                          {{"--schedule", "none"},
                                           {"--dropout", "0.1"},
                                           {"--eval-interval", "10"},
                                           {"--log-dir", (tmp / "log").string()}}) +
                                    " --checkpoint " + (tmp / dir).string() + extra,
                                tmp / (dir + std::to_string(iters) + ".txt"));
    EXPECT_EQ(r.code, 0) << r.output;
    return r;
  };
  run(20, "whole", "");
  run(10, "halves", "");
  const Result rest = run(20, "halves", " --resume");
  EXPECT_NE(rest.output.find("resuming from"), std::string::npos) << rest.output;
  expect_same_tensors(tmp / "whole" / "model.safetensors", tmp / "halves" / "model.safetensors");
}

// Each mode trains the model one device trains: the same parameters up to float32 rounding.
TEST(GptCommand, EveryParallelModeTrainsAsOneDevice) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  const auto run = [&](const std::string& name, const std::string& extra,
                       const std::string& launcher = "") {
    const Result r = tandem_cli(launcher + gpt_flags(tmp / "text.txt", 10, {{"--n-layer", "2"}}) +
                                    " --checkpoint " + (tmp / name).string() + " --log-dir " +
                                    (tmp / ("log-" + name)).string() + extra,
                                tmp / (name + ".txt"));
    EXPECT_EQ(r.code, 0) << r.output;
    return r;
  };
  run("one", "");
  const Result pipe = run("pipe", " --pipeline cpu:0,cpu:1 --chunks 2 --pipeline-schedule 1f1b");
  EXPECT_NE(pipe.output.find("pipeline over cpu:0,cpu:1"), std::string::npos) << pipe.output;
  run("dp", " --data-parallel cpu:0,cpu:1");
  run("ac", " --activation-checkpointing");
  // Two processes, each on its rows of every batch.
  const Result ddp =
      run("ddp", " --ddp", "launch --standalone --nproc-per-node 2 -- " TANDEM_CLI " ");
  EXPECT_NE(ddp.output.find("DDP over 2 ranks"), std::string::npos) << ddp.output;
  // Apex's delay_allreduce: every bucket after backward, the same arithmetic.
  const Result delayed = run("ddp-delay", " --ddp --ddp-hook delay_allreduce",
                             "launch --standalone --nproc-per-node 2 -- " TANDEM_CLI " ");
  EXPECT_NE(delayed.output.find("delay_allreduce)"), std::string::npos) << delayed.output;
  // ZeRO-2: each rank updates half the parameters, and the checkpoint gathers Adam's moments.
  const Result zero =
      run("zero2", " --ddp --zero 2", "launch --standalone --nproc-per-node 2 -- " TANDEM_CLI " ");
  EXPECT_NE(zero.output.find("ZeRO stage 2)"), std::string::npos) << zero.output;
  EXPECT_NE(zero.output.find("memory per rank (rank 0, cpu"), std::string::npos) << zero.output;
  // ZeRO-3: every block, ln_f and the tied embedding sharded; every rank evaluates (the
  // all-gathers are collective), and the checkpoint gathers parameters and moments to rank 0.
  const Result zero3 =
      run("zero3", " --ddp --zero 3", "launch --standalone --nproc-per-node 2 -- " TANDEM_CLI " ");
  EXPECT_NE(zero3.output.find("ZeRO stage 3: 5 units)"), std::string::npos) << zero3.output;
  const SafetensorsFile ddp_opt =
      load_safetensors((tmp / "ddp" / "optimizer.safetensors").string());
  for (const char* mode : {"zero2", "zero3"}) {
    const SafetensorsFile zero_opt =
        load_safetensors((tmp / mode / "optimizer.safetensors").string());
    ASSERT_EQ(ddp_opt.tensors.size(), zero_opt.tensors.size());
    for (const auto& [name, t] : ddp_opt.tensors)
      EXPECT_LT(abs(t - zero_opt.at(name)).max().item(), 1e-6)
          << mode << ": optimizer state " << name;
  }
  const SafetensorsFile a = load_safetensors((tmp / "one" / "model.safetensors").string());
  for (const char* mode : {"pipe", "dp", "ac", "ddp", "ddp-delay", "zero2", "zero3"}) {
    const SafetensorsFile b = load_safetensors((tmp / mode / "model.safetensors").string());
    ASSERT_EQ(a.tensors.size(), b.tensors.size()) << mode;
    for (const auto& [name, t] : a.tensors) {
      const double diff = abs(t - b.at(name)).max().item();
      EXPECT_LT(diff, 1e-4) << mode << ": " << name << " differs by " << diff;
    }
  }
}

// Tensor parallelism under `tandem launch` (parallel/tp's plan, rank r of each tp group holding
// its heads, MLP features and vocabulary rows) trains one device's model up to float32 rounding,
// alone (--tp 2) and on a 2 x 2 mesh with DDP and sequence parallelism or with fully_shard;
// its checkpoint holds
// whole tensors (Adam's moments too) that resume at any tensor-parallel size; and with dropout
// (drawn from each rank's own stream inside the regions) a resumed run is bit-identical.
TEST(GptCommand, TensorParallelTrainsAsOneDeviceAndResumesAtAnySize) {
  CheckpointedRuns runs;
  TempDir& tmp = runs.tmp;
  const auto run = [&](auto&&... args) { return runs.run(args...); };
  const auto expect_close = [&](auto&&... args) { runs.expect_close(args...); };
  run("", 10, "one", "");
  const Result tp = run(runs.two, 10, "tp", " --tp 2");
  EXPECT_NE(tp.output.find("tensor parallel: 1 x 2 mesh (dp, tp)"), std::string::npos) << tp.output;
  const Result mesh = run(runs.four, 10, "mesh", " --tp 2 --dp 2 --sequence-parallel");
  EXPECT_NE(mesh.output.find("tensor parallel: 2 x 2 mesh (dp, tp); rank 0 at (0, 0) (shm, "
                             "sequence parallel)"),
            std::string::npos)
      << mesh.output;
  // fully_shard over "dp" of the tensor-parallel slices (ZeRO-3 × TP).
  const Result fsdp = run(runs.four, 10, "mesh-fsdp", " --tp 2 --zero 3");
  EXPECT_NE(fsdp.output.find("(shm, fully sharded over dp)"), std::string::npos) << fsdp.output;
  // ZeRO-1 over "dp" of the slices' optimizer state, and checkpointed blocks cut by the plan.
  const Result zero = run(runs.four, 10, "mesh-zero", " --tp 2 --zero 1");
  EXPECT_NE(zero.output.find("(shm, ZeRO stage 1 over dp)"), std::string::npos) << zero.output;
  run(runs.two, 10, "tp-ac", " --tp 2 --activation-checkpointing");
  for (const char* mode : {"tp", "mesh", "mesh-fsdp", "mesh-zero", "tp-ac"})
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      expect_close("one", mode, file);

  // Resume 10 more iterations: a TP = 2 checkpoint on one process and on TP x fully sharded DP,
  // and one process's on TP = 2.
  for (const char* dir : {"one", "tp"}) fs::copy(tmp / dir, tmp / (std::string(dir) + "-more"));
  fs::copy(tmp / "tp", tmp / "fsdp-more");
  fs::copy(tmp / "tp", tmp / "zero-more");
  run("", 20, "tp-more", " --resume");
  run(runs.two, 20, "one-more", " --resume --tp 2");
  run(runs.four, 20, "fsdp-more", " --resume --tp 2 --zero 3");
  run(runs.four, 20, "zero-more", " --resume --tp 2 --zero 2");
  run("", 20, "whole", "");
  for (const char* dir : {"tp-more", "one-more", "fsdp-more", "zero-more"})
    expect_close("whole", dir, "model.safetensors");
  expect_close("whole", "zero-more", "optimizer.safetensors");

  // A padded token table (the padding never read, nor drawn by generate); --tp pads it to its
  // size by itself, and the checkpoint holds the unpadded table.
  const Result pad = run("", 10, "pad", " --vocab-multiple 64");
  EXPECT_NE(pad.output.find("vocabulary 20 (padded to 64)"), std::string::npos) << pad.output;
  const Result pad_tp = run(runs.two, 10, "pad-tp", " --tp 2 --vocab-multiple 3");
  EXPECT_NE(pad_tp.output.find("vocabulary 20 (padded to 24)"), std::string::npos) << pad_tp.output;
  EXPECT_EQ(load_safetensors((tmp / "pad-tp" / "model.safetensors").string())
                .at("transformer.wte.weight")
                .size(0),
            20);
  const Result text = tandem_cli(
      "generate --tokens 200 --temperature 2 --top-k 0 --checkpoint " + (tmp / "pad").string(),
      tmp / "generated.txt");
  EXPECT_EQ(text.code, 0) << text.output;
  EXPECT_GE(text.output.size(), 200u) << text.output;

  // With dropout: 10 iterations, then 10 more, give the bits of 20 at once.
  run(runs.two, 20, "drop-whole", " --tp 2", "0.1");
  run(runs.two, 10, "drop-halves", " --tp 2", "0.1");
  run(runs.two, 20, "drop-halves", " --tp 2 --resume", "0.1");
  // And with each block recomputed in backward: the same masks again, from each rank's stream.
  run(runs.two, 20, "drop-ac", " --tp 2 --activation-checkpointing", "0.1");
  for (const char* dir : {"drop-halves", "drop-ac"})
    expect_same_tensors(tmp / "drop-whole" / "model.safetensors", tmp / dir / "model.safetensors");

  for (const auto& [launcher, flags, message] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {runs.two, " --tp 2 --dp 2", "--tp 2 --dp 2: the run has 2 ranks, which is not dp x tp"},
           {runs.two, " --tp 2 --zero 1",
            "ZeRO shards over the data-parallel ranks, and this run "
            "has one (2 ranks = dp x tp with dp = 1)"},
           {runs.four, " --tp 4", "n_head (2) does not divide by the tensor-parallel size 4"},
           {"", " --dp 2", "--dp and --sequence-parallel describe a --tp run"}}) {
    const Result r = tandem_cli(launcher + gpt_flags(tmp / "text.txt", 5) + " --log-dir " +
                                    (tmp / "log-bad").string() + flags,
                                tmp / "bad.txt");
    EXPECT_NE(r.code, 0) << flags;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << "\n" << r.output;
  }
}

// Pipeline parallelism under `tandem launch` (a stage of blocks per rank, parallel's
// DistributedPipeline), alone, with tensor parallelism and with data parallelism, trains one
// device's model up to float32 rounding; its checkpoint is one device's (the stages' tensors and
// AdamW's state gathered on rank 0) and resumes on one process, and one process's on 4 stages;
// with ZeRO-1/2 and fully_shard over each stage's data-parallel ranks too.
TEST(GptCommand, PipelineParallelTrainsAsOneDeviceAndResumesOnAnyLayout) {
  CheckpointedRuns runs;
  runs.run("", 10, "one", "");
  const Result pp = runs.run(runs.four, 10, "pp-tp", " --pp 2 --tp 2 --pipeline-schedule 1f1b");
  EXPECT_NE(pp.output.find("pipeline x tensor parallel: 1 x 2 x 2 mesh (dp, pp, tp)"),
            std::string::npos)
      << pp.output;
  runs.run(runs.four, 10, "dp-pp", " --pp 2 --dp 2 --chunks 2");
  runs.run(runs.four, 10, "pp-tp-ac", " --pp 2 --tp 2 --activation-checkpointing");
  // ZeRO over each stage's data-parallel ranks: the micro-batches under DDP's no_sync(), then
  // one reduce-scatter into each rank's pieces.
  const Result zero = runs.run(runs.four, 10, "pp-zero", " --pp 2 --dp 2 --zero 2 --chunks 2");
  EXPECT_NE(zero.output.find("ZeRO stage 2 over dp)"), std::string::npos) << zero.output;
  // fully_shard over each stage's data-parallel ranks: every micro-batch's forward gathers its
  // units, one reduce-scatter per unit once the micro-batches' gradients are all in.
  const Result fsdp = runs.run(runs.four, 10, "pp-fsdp", " --pp 2 --dp 2 --zero 3 --chunks 2");
  EXPECT_NE(fsdp.output.find("fully sharded over dp"), std::string::npos) << fsdp.output;
  for (const char* mode : {"pp-tp", "dp-pp", "pp-tp-ac", "pp-zero", "pp-fsdp"})
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      runs.expect_close("one", mode, file);
  for (const char* dir : {"one", "pp-tp"})
    fs::copy(runs.tmp / dir, runs.tmp / (std::string(dir) + "-more"));
  fs::copy(runs.tmp / "pp-tp", runs.tmp / "zero-more");
  runs.run("", 20, "pp-tp-more", " --resume");
  runs.run(runs.four, 20, "one-more", " --resume --pp 4 --chunks 2");
  runs.run(runs.four, 20, "zero-more", " --resume --pp 2 --dp 2 --zero 1 --chunks 2");
  runs.run("", 20, "whole", "");
  for (const char* dir : {"pp-tp-more", "one-more", "zero-more"})
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      runs.expect_close("whole", dir, file);
  for (const auto& [launcher, flags, message] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {runs.two, " --pp 4", "--pp 4: the run has 2 ranks, which is not dp x pp x tp"},
           {"", " --pp 2 --pipeline cpu:0,cpu:1", "--pp (a stage per rank) and --pipeline"}}) {
    const Result r = tandem_cli(launcher + gpt_flags(runs.tmp / "text.txt", 5) + " --log-dir " +
                                    (runs.tmp / "log-bad").string() + flags,
                                runs.tmp / "bad.txt");
    EXPECT_NE(r.code, 0) << flags;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << "\n" << r.output;
  }
}

// Every pipeline schedule in the trainer, composed with data and tensor parallelism and ZeRO:
// the V schedules hold stages 0 and 3 of 4 on rank 0 (the tied embedding and head on one rank),
// interleaved stages 0 and 2; each run ends with one device's model and AdamW state.
TEST(GptCommand, EveryPipelineScheduleTrainsAsOneDevice) {
  CheckpointedRuns runs;
  runs.run("", 10, "one", "");
  const Result v = runs.run(runs.two, 10, "zb-v", " --pp 2 --chunks 4 --pipeline-schedule zb-v");
  EXPECT_NE(v.output.find("zb-v, 4 chunks; this rank stages 0, 3 of 4"), std::string::npos)
      << v.output;
  // The report draws the last step as it ran beside the simulator's prediction from its costs.
  const std::string report = read_file(runs.tmp / "log-zb-v" / "report.html");
  for (const char* part : {"<h2>Pipeline schedule", "zb-v, p = 2, m = 4: measured",
                           "zb-v, p = 2, m = 4: simulated from the step", "Idle share per rank"})
    EXPECT_NE(report.find(part), std::string::npos) << part;
  runs.run(runs.four, 10, "dualpipev", " --pp 2 --tp 2 --chunks 4 --pipeline-schedule dualpipev");
  runs.run(runs.four, 10, "interleaved",
           " --pp 2 --dp 2 --zero 3 --chunks 4 --pipeline-schedule interleaved");
  runs.run(runs.four, 10, "zb-h1", " --pp 2 --dp 2 --zero 2 --chunks 2 --pipeline-schedule zb-h1");
  // fully_shard over a V: rank 0 holds the first and last stages, the tied embedding and head.
  runs.run(runs.four, 10, "zb-v-fsdp",
           " --pp 2 --dp 2 --zero 3 --chunks 4 --pipeline-schedule zb-v");
  for (const char* mode : {"zb-v", "dualpipev", "interleaved", "zb-h1", "zb-v-fsdp"})
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      runs.expect_close("one", mode, file);
  for (const auto& [launcher, flags, message] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {runs.two, " --pp 2 --pipeline-schedule 1f1b --virtual-stages 3",
            "--virtual-stages is the interleaved schedule's"},
           {runs.two, " --pp 2 --chunks 2 --pipeline-schedule dualpipev",
            "2 micro-batches over 2 ranks; DualPipeV needs at least 2p = 4"},
           {runs.two, " --pp 2 --chunks 5 --pipeline-schedule interleaved",
            "5 micro-batches over 2 ranks"},
           {runs.two, " --pp 2 --chunks 4 --pipeline-schedule wave",
            "--pipeline-schedule wave is not one of gpipe, 1f1b"}}) {
    const Result r = tandem_cli(launcher + gpt_flags(runs.tmp / "text.txt", 5) + " --log-dir " +
                                    (runs.tmp / "log-bad").string() + flags,
                                runs.tmp / "bad.txt");
    EXPECT_NE(r.code, 0) << flags;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << "\n" << r.output;
  }
}

// --zero 3 --sharded-checkpoint: each of 2 ranks writes its rows of the GPT (the tied embedding
// included) and the index carries the vocabulary; resumed without the flag, the run ends where
// one device's uninterrupted run does, in one whole file again. The same across layouts.
TEST(GptCommand, ShardedCheckpointResumesAsOneDevice) {
  CheckpointedRuns runs;
  runs.run(runs.two, 10, "sharded", " --ddp --zero 3 --sharded-checkpoint");
  EXPECT_EQ(read_file(runs.tmp / "sharded" / "latest"), "step-10");
  EXPECT_TRUE(fs::is_regular_file(runs.tmp / "sharded" / "step-10" / "rank-1-of-2.safetensors"));
  EXPECT_NE(read_file(runs.tmp / "sharded" / "step-10" / "index.json").find("\"vocabulary\""),
            std::string::npos);
  runs.run(runs.two, 20, "sharded", " --ddp --zero 3 --resume");
  EXPECT_FALSE(fs::exists(runs.tmp / "sharded" / "latest"));
  runs.run("", 20, "whole", "");
  runs.expect_close("whole", "sharded", "model.safetensors");

  // Any layout: saved by PP x TP, read whole by generate, resumed sharded by TP x ZeRO-1, then
  // by DDP x ZeRO-2 into one whole file again: one device's 30 iterations.
  const Result pp = runs.run(runs.four, 10, "layout", " --pp 2 --tp 2 --sharded-checkpoint");
  EXPECT_TRUE(fs::is_regular_file(runs.tmp / "layout" / "step-10" / "rank-3-of-4.safetensors"))
      << pp.output;
  const Result text =
      tandem_cli("generate --tokens 50 --checkpoint " + (runs.tmp / "layout").string(),
                 runs.tmp / "generated.txt");
  EXPECT_EQ(text.code, 0) << text.output;
  runs.run(runs.four, 20, "layout", " --tp 2 --zero 1 --sharded-checkpoint --resume");
  EXPECT_EQ(read_file(runs.tmp / "layout" / "latest"), "step-20");
  runs.run(runs.two, 30, "layout", " --ddp --zero 2 --resume");
  runs.run("", 30, "whole-30", "");
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    runs.expect_close("whole-30", "layout", file);
}

TEST(GptCommand, BadInputIsAClearError) {
  TempDir tmp;
  write_text(tmp / "short.txt", 2);
  std::ofstream(tmp / "latin1.txt") << "caf\xe9 au lait, " << std::string(200, 'x');
  write_text(tmp / "text.txt", 300);
  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {gpt_flags(tmp / "short.txt", 5), "fewer than one window of block size + 1 = 17"},
           {gpt_flags(tmp / "latin1.txt", 5), "not UTF-8 text: an invalid byte sequence at byte 3"},
           {gpt_flags(tmp / "missing.txt", 5), "missing.txt: cannot open the text file"},
           {gpt_flags(tmp / "text.txt", 5, {{"--n-embd", "15"}}), "does not split evenly into"},
           {gpt_flags(tmp / "text.txt", 5, {{"--optimizer", "sgd"}}), "trains with AdamW"},
           {gpt_flags(tmp / "text.txt", 5, {{"--warmup-iters", "9"}}),
            "--warmup-iters 9 must be in"}}) {
    const Result r = tandem_cli(flags + " --log-dir " + (tmp / "log").string(), tmp / "out.txt");
    EXPECT_NE(r.code, 0) << flags;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << "\n" << r.output;
  }
}

// A resume in the same layout is bit-identical to an uninterrupted run whatever the layout: the
// whole state of any layout (parallel/whole_state.h) gives every rank back what it held.
TEST(GptCommand, ResumeInTheSameLayoutIsBitIdenticalUnderEveryLayout) {
  CheckpointedRuns runs;
  int i = 0;
  for (const auto& [launcher, flags] : std::vector<std::pair<std::string, std::string>>{
           {runs.four, " --tp 2 --pp 2 --chunks 2"},
           {runs.two, " --ddp --zero 1"},
           {runs.four, " --pp 2 --dp 2 --zero 3 --chunks 2"}}) {
    const std::string whole = "whole-" + std::to_string(i), halves = "halves-" + std::to_string(i);
    ++i;
    runs.run(launcher, 20, whole, flags);
    runs.run(launcher, 10, halves, flags);
    runs.run(launcher, 20, halves, flags + " --resume");
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      expect_same_tensors(runs.tmp / whole / file, runs.tmp / halves / file);
  }
}

}  // namespace
