// tools/gpt_moe_command_test.cpp — `tandem train --model gpt --n-experts E` as a user runs it:
// an MoE GPT (4 experts, top-2, capacity 1.0: tokens dropped) trains under expert parallelism
// (--ep 2, --ep 4, and dp × ep = 2 × 2 under DDP, ZeRO-2 and fully_shard under `tandem launch`),
// under data parallelism alone (--ddp: the capacity counted over the ranks' rows) and with tensor
// parallelism (--tp 2, --tp 2 --ep 2) to one device's model and AdamW state up to float32 rounding,
// routing as one device does; the progress line shows the routing; a checkpoint saved under --ep 2
// resumes on one device and generates; bad input is a clear error naming the flags.
#include <map>
#include <tuple>

#include "cli_test_support.h"
#include "gpt_test_support.h"

namespace {
using namespace tandem;
using namespace tandem::cli_test;

const std::string kExperts = " --n-experts 4 --top-k 2 --capacity-factor 1.0";

// Directories a and b hold `file`s with the same tensors to float32 rounding: 1e-4 as the other
// modes' tests, 1e-3 for the experts. Their rows arrive in another order, so each expert's
// gradient sums them in another order, and Adam divides each update by √v: an expert few tokens
// reach has a small gradient whose rounding is a larger share of it (10 steps at lr 1e-2). The
// float64 test (tests/parallel/expert_parallel_test.cpp) shows the layouts agree to 1e-13.
void expect_close(const TempDir& tmp, const std::string& a, const std::string& b,
                  const char* file) {
  const SafetensorsFile x = load_safetensors((tmp / a / file).string());
  const SafetensorsFile y = load_safetensors((tmp / b / file).string());
  ASSERT_EQ(x.tensors.size(), y.tensors.size()) << a << " " << b << " " << file;
  for (const auto& [name, t] : x.tensors) {
    const double bound = name.find(".experts.") != std::string::npos ? 1e-3 : 1e-4;
    EXPECT_LT(abs(t - y.at(name)).max().item(), bound) << a << " vs " << b << ": " << name;
  }
}

// The routing summary of the last progress line ("experts 6-58 tokens (mean 32), 9 dropped").
std::string routing_of(const std::string& output) {
  const size_t at = output.rfind("experts ");
  return at == std::string::npos ? "" : output.substr(at, output.find('\n', at) - at);
}

TEST(GptCommand, ExpertParallelTrainsAsOneDeviceUnderEveryLayout) {
  CheckpointedRuns runs;
  TempDir& tmp = runs.tmp;
  const Result one = runs.run("", 10, "one", kExperts);
  const std::string routing = routing_of(one.output);
  EXPECT_NE(routing.find(" dropped ("), std::string::npos) << one.output;
  EXPECT_EQ(routing.find(" 0 dropped"), std::string::npos) << "the capacity must drop: " << routing;
  for (const auto& [launcher, dir, flags] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {runs.two, "ep2", " --ep 2"},
           {runs.four, "ep4", " --ep 4"},
           {runs.four, "dp2ep2", " --ep 2 --dp 2"},
           {runs.four, "zero2", " --ep 2 --dp 2 --zero 2"},
           {runs.two, "ddp", " --ddp"},
           {runs.two, "tp", " --tp 2"},
           {runs.four, "tp-ep", " --tp 2 --ep 2"},
           {runs.four, "fsdp", " --ep 2 --dp 2 --zero 3"}}) {
    const Result r = runs.run(launcher, 10, dir, kExperts + flags);
    EXPECT_EQ(routing_of(r.output), routing) << dir << ": the routing differs from one device's";
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      expect_close(tmp, "one", dir, file);
  }
  // Saved under --ep 2 (one device's names and shapes), resumed and generated on one device.
  fs::copy(tmp / "ep2", tmp / "ep2-more");
  runs.run("", 20, "ep2-more", kExperts + " --resume");
  runs.run("", 20, "whole", kExperts);
  expect_close(tmp, "whole", "ep2-more", "model.safetensors");
  const Result text =
      tandem_cli("generate --tokens 50 --checkpoint " + (tmp / "ep2").string(), tmp / "gen.txt");
  EXPECT_EQ(text.code, 0) << text.output;
  EXPECT_GE(text.output.size(), 50u) << text.output;
}

TEST(GptCommand, ExpertsBadInputNamesTheFlags) {
  CheckpointedRuns runs;
  for (const auto& [launcher, flags, message] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"", " --n-experts 6 --ep 4",
            "--ep 4 splits the experts over the ranks, and "
            "--n-experts 6 does not divide by it"},
           {"", " --n-experts 4 --top-k 5", "--top-k 5 must be between 1 and --n-experts (4)"},
           {"", " --n-experts 4 --capacity-factor 0", "--capacity-factor 0 would drop every token"},
           {"", " --ep 2", "--ep describes a mixture of experts: it needs --n-experts E"},
           {"", " --n-experts 4 --tp 2 --sequence-parallel",
            "--n-experts with --sequence-parallel is not supported yet"},
           {runs.two, " --n-experts 4 --ep 4",
            "--ep 4: the run has 2 ranks, which is not dp x ep x tp"},
       }) {
    const Result r =
        tandem_cli(launcher + gpt_flags(runs.tmp / "text.txt", 5) + flags, runs.tmp / "bad.txt");
    EXPECT_NE(r.code, 0) << flags;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << ": " << r.output;
  }
}

}  // namespace
