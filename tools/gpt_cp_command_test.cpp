// tools/gpt_cp_command_test.cpp — `tandem train --model gpt --cp N` as a user runs it under
// `tandem launch`: context parallelism (each rank 1/N of every sequence's positions, its heads
// attending over the whole sequence by ring or Ulysses) trains one device's model up to float32
// rounding alone, with fully_shard over dp × cp, ZeRO-2, tensor parallelism and a pipeline, and
// with dropout (each rank drawing one device's numbers at its positions); its
// checkpoint resumes under another layout and generates on one device; bad input is a clear
// error naming the flags.
#include <map>
#include <tuple>

#include "cli_test_support.h"
#include "gpt_test_support.h"

namespace {
using namespace tandem;
using namespace tandem::cli_test;

TEST(GptCommand, ContextParallelTrainsAsOneDeviceUnderEveryLayout) {
  CheckpointedRuns runs;
  TempDir& tmp = runs.tmp;
  runs.run("", 10, "one", "");
  const Result cp = runs.run(runs.two, 10, "cp", " --cp 2");
  EXPECT_NE(cp.output.find("context parallel: 1 x 2 x 1 mesh (dp, cp, tp); rank 0 at (0, 0, 0) "
                           "(shm, context parallel (ring, zig-zag))"),
            std::string::npos)
      << cp.output;
  runs.run(runs.two, 10, "ulysses", " --cp 2 --cp-algorithm ulysses");
  runs.run(runs.four, 10, "cp4", " --cp 4");
  const Result fsdp = runs.run(runs.four, 10, "fsdp", " --cp 2 --zero 3");
  EXPECT_NE(fsdp.output.find("fully sharded over dp x cp"), std::string::npos) << fsdp.output;
  runs.run(runs.four, 10, "zero", " --cp 2 --cp-algorithm ulysses --zero 2");
  const Result tp = runs.run(runs.four, 10, "tp", " --cp 2 --tp 2 --sequence-parallel");
  EXPECT_NE(tp.output.find("tensor x context parallel: 1 x 2 x 2 mesh (dp, cp, tp)"),
            std::string::npos)
      << tp.output;
  runs.run(runs.four, 10, "pp", " --cp 2 --pp 2 --chunks 2");
  for (const char* mode : {"cp", "ulysses", "cp4", "fsdp", "zero", "tp", "pp"})
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      runs.expect_close("one", mode, file);

  // With dropout, each rank draws one device's numbers at its positions.
  runs.run("", 10, "one-drop", "", "0.1");
  runs.run(runs.two, 10, "cp-drop", " --cp 2", "0.1");
  runs.run(runs.two, 10, "ulysses-drop", " --cp 2 --cp-algorithm ulysses", "0.1");
  for (const char* mode : {"cp-drop", "ulysses-drop"})
    runs.expect_close("one-drop", mode, "model.safetensors");

  // A context-parallel checkpoint resumes under another layout, and generates on one device.
  fs::copy(tmp / "cp", tmp / "cp-more");
  runs.run(runs.four, 20, "cp-more", " --resume --cp 2 --cp-algorithm ulysses --zero 1");
  runs.run("", 20, "whole", "");
  runs.expect_close("whole", "cp-more", "model.safetensors");
  const Result text =
      tandem_cli("generate --tokens 50 --checkpoint " + (tmp / "cp").string(), tmp / "gen.txt");
  EXPECT_EQ(text.code, 0) << text.output;
  EXPECT_GE(text.output.size(), 50u) << text.output;
}

TEST(GptCommand, ContextParallelBadInputNamesTheFlags) {
  CheckpointedRuns runs;
  for (const auto& [launcher, flags, message] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"", " --cp 3", "--cp 3: --block-size 16 does not split into 6 equal chunks"},
           {"", " --cp-algorithm ulysses", "--cp-algorithm says how a context-parallel run"},
           {"", " --cp 4 --cp-algorithm ulysses",
            "each rank attends for heads/4 of the heads, and a rank has 2 (--n-head 2)"},
           {"", " --cp 2 --cp-algorithm star", "--cp-algorithm star is not one of ring, ulysses"},
           {runs.two, " --cp 4", "--cp 4: the run has 2 ranks, which is not dp x cp x tp"},
       }) {
    const Result r =
        tandem_cli(launcher + gpt_flags(runs.tmp / "text.txt", 5) + flags, runs.tmp / "bad.txt");
    EXPECT_NE(r.code, 0) << flags;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << ": " << r.output;
  }
  const Result image = tandem_cli("train --model mlp --cp 2", runs.tmp / "mlp.txt");
  EXPECT_NE(image.output.find("--cp 2 splits a sequence's positions over the ranks: it needs "
                              "--model gpt"),
            std::string::npos)
      << image.output;
}

}  // namespace
