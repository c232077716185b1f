// tools/plan_command_test.cpp — `tandem plan` and `tandem train --predict` as a user runs them:
// each rank's memory rehearsed on the meta device, then measured by the run itself on its
// device, term by term. Every rank's predicted peak is within ±5 % of its measured one in every
// mode on 2 and 4 ranks (bench/RESULTS.md has the 40-layout table); the parameters the ranks
// hold once placed are the same bytes; bad input names the flag.
#include <fstream>
#include <regex>
#include <sstream>

#include "cli_test_support.h"
#include "gpt_test_support.h"

namespace {
using namespace tandem;
using namespace tandem::cli_test;

struct Row {
  double placed[2], peak[2], ratio;  // [0] predicted, [1] measured (MiB)
};

// The rows of --predict's table: "  0 (...)  a / b  c / d  e / f  g / h  ratio".
std::vector<Row> table_rows(const std::string& output) {
  const std::regex row(
      R"(\n(?:\[rank0\]: )?  \d+[^\n]*?  ([\d.]+) / ([\d.]+)  ([\d.]+) / ([\d.]+)  )"
      R"(([\d.]+) / ([\d.]+)  ([\d.]+) / ([\d.]+)  ([\d.]+)(?=\n))");
  std::vector<Row> rows;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), row);
       it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    rows.push_back({.placed = {std::stod(m[1]), std::stod(m[2])},
                    .peak = {std::stod(m[7]), std::stod(m[8])},
                    .ratio = std::stod(m[9])});
  }
  return rows;
}

TEST(PlanCommand, PredictedPeaksAreWithinFivePercentOfMeasuredInEveryMode) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  const std::string two = "launch --standalone --nproc-per-node 2 -- " TANDEM_CLI " ",
                    four = "launch --standalone --nproc-per-node 4 -- " TANDEM_CLI " ";
  const std::vector<std::pair<std::string, std::string>> layouts = {
      {"", ""},
      {"", " --activation-checkpointing"},
      {two, " --ddp"},
      {two, " --ddp --zero 1"},
      {two, " --ddp --zero 2"},
      {two, " --ddp --zero 3"},
      {two, " --tp 2 --sequence-parallel"},
      {two, " --pp 2 --chunks 4 --pipeline-schedule 1f1b"},
      {two, " --cp 2"},
      {four, " --tp 2 --zero 1"},
      {four, " --pp 2 --chunks 2 --zero 1"},
      {four, " --cp 2 --tp 2"}};
  int n = 0;
  for (const auto& [launcher, flags] : layouts) {
    const Result r = tandem_cli(
        launcher +
            gpt_flags(tmp / "text.txt", 2,
                      {{"--n-layer", "2"}, {"--n-embd", "32"}, {"--warmup-iters", "1"}}) +
            " --log-dir " + (tmp / "log").string() + " --predict" + flags,
        tmp / ("predict" + std::to_string(n++) + ".txt"));
    ASSERT_EQ(r.code, 0) << flags << "\n" << r.output;
    const std::vector<Row> rows = table_rows(r.output);
    ASSERT_EQ(rows.size(), size_t(launcher.empty()  ? 1
                                  : launcher == two ? 2
                                                    : 4))
        << flags << "\n"
        << r.output;
    for (const Row& row : rows) {
      EXPECT_NEAR(row.ratio, 1.0, 0.05) << flags << "\n" << r.output;
      EXPECT_NEAR(row.placed[0], row.placed[1], 0.0015) << flags << ": parameters\n" << r.output;
    }
  }
}

TEST(PlanCommand, PlansALayoutWithoutRunningIt) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  const Result r = tandem_cli(
      "plan --model gpt --text " + (tmp / "text.txt").string() +
          " --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch-size 8 --nproc 4 --tp 2 "
          "--pp 2 --chunks 2 --pipeline-schedule zb-h1",
      tmp / "plan.txt");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("on 4 ranks; each rank's memory, rehearsed on the meta device"),
            std::string::npos)
      << r.output;
  for (const char* rank : {"0 (pp 0, tp 0)", "1 (pp 0, tp 1)", "2 (pp 1, tp 0)", "3 (pp 1, tp 1)"})
    EXPECT_NE(r.output.find(rank), std::string::npos) << rank << "\n" << r.output;
  EXPECT_NE(r.output.find("the most any rank needs: "), std::string::npos) << r.output;
}

TEST(PlanCommand, SearchesEveryLayoutAndSaysWhichFit) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  const std::string run = "plan --model gpt --text " + (tmp / "text.txt").string() +
                          " --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch-size 8 "
                          "--nproc 2 --search --memory ";
  const Result some = tandem_cli(run + "0.5MiB", tmp / "some.txt");
  ASSERT_EQ(some.code, 0) << some.output;
  EXPECT_NE(some.output.find("on 2 ranks: "), std::string::npos) << some.output;
  for (const char* layout : {"--tp 2 --sequence-parallel",
                             "--pp 2 --chunks 4 "
                             "--pipeline-schedule zb-v",
                             "--cp 2 --zero 3", "--ddp"})
    EXPECT_NE(some.output.find(layout), std::string::npos) << layout << "\n" << some.output;
  EXPECT_NE(some.output.find(" layouts fit in 0.500 MiB"), std::string::npos) << some.output;
  const Result none = tandem_cli(run + "0.01MiB", tmp / "none.txt");
  ASSERT_EQ(none.code, 0) << none.output;
  EXPECT_NE(none.output.find("no layout fits in 0.010 MiB. The closest, "), std::string::npos)
      << none.output;
  EXPECT_NE(none.output.find(" too much (placed "), std::string::npos) << none.output;
}

TEST(PlanCommand, PredictsStepTimesFromAProfileOfThisHost) {
  TempDir tmp;
  write_text(tmp / "text.txt", 300);
  const std::string model = "plan --model gpt --text " + (tmp / "text.txt").string() +
                            " --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch-size 8 "
                            "--nproc 2 ";
  const std::string profile = (tmp / "host.profile").string();
  const Result calibrated = tandem_cli(model + "--tp 2 --calibrate " + profile, tmp / "c.txt");
  ASSERT_EQ(calibrated.code, 0) << calibrated.output;
  for (const char* says :
       {"predicted step: ", "rank  compute  communication  idle", "profile saved to "})
    EXPECT_NE(calibrated.output.find(says), std::string::npos) << says << calibrated.output;
  const Result again = tandem_cli(model + "--tp 2 --profile " + profile, tmp / "p.txt");
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("predicted step: "), std::string::npos) << again.output;
  // Another layout calls kernels of other shapes, which the profile has not timed.
  const Result other = tandem_cli(model + "--pp 2 --profile " + profile, tmp / "o.txt");
  EXPECT_NE(other.code, 0) << other.output;
  EXPECT_NE(other.output.find("the profile has no time for '"), std::string::npos) << other.output;
  // --search --calibrate times every layout's kernels: the fastest that fit come first.
  const Result search = tandem_cli(model + "--search --calibrate " + profile, tmp / "s.txt");
  ASSERT_EQ(search.code, 0) << search.output;
  const std::regex first(R"(:\n +([\d.]+) ms +([\d.]+)% comm +[\d.]+ MiB)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(search.output, m, first)) << search.output;
  EXPECT_GT(std::stod(m[1]), 0) << search.output;
  const Result searched = tandem_cli(model + "--search --profile " + profile, tmp / "s2.txt");
  EXPECT_EQ(searched.code, 0) << searched.output;

  // The run itself: the prediction first, the measurement at the end and in the report.
  const auto train = [&](const std::string& width) {
    return "launch --standalone --nproc-per-node 2 -- " TANDEM_CLI " " +
           gpt_flags(tmp / "text.txt", 4,
                     {{"--n-layer", "2"},
                      {"--n-embd", width},
                      {"--warmup-iters", "1"},
                      {"--log-dir", (tmp / "log").string()}}) +
           " --tp 2 --predict --profile " + profile;
  };
  const Result run = tandem_cli(train("32"), tmp / "t.txt");
  ASSERT_EQ(run.code, 0) << run.output;
  const size_t before = run.output.find("step time per rank, predicted from the profile of "),
               after = run.output.find(
                   "step time per rank, predicted / measured (ms, the mean "
                   "of 3 steps after the first):");
  ASSERT_NE(before, std::string::npos) << run.output;
  ASSERT_NE(after, std::string::npos) << run.output;
  EXPECT_LT(before, after) << run.output;
  const std::regex rank_row(R"(\n(?:\[rank0\]: )?  (\d) +[\d.]+ / [\d.]+ +[\d.]+ / [\d.]+ +)"
                            R"(([\d.]+) / ([\d.]+) +([\d.]+)(?=\n))");
  int rows = 0;
  for (auto it = std::sregex_iterator(run.output.begin() + long(after), run.output.end(), rank_row);
       it != std::sregex_iterator(); ++it, ++rows)
    EXPECT_GT(std::stod((*it)[3]), 0) << run.output;  // a measured step
  EXPECT_EQ(rows, 2) << run.output;
  const std::string report = read_file(tmp / "log" / "report.html");
  EXPECT_NE(report.find("Step time, predicted and measured"), std::string::npos);
  EXPECT_NE(report.find("blocked on communication"), std::string::npos);
  // A model the profile has not timed fails before any work, naming the file and the remedy.
  const Result untimed = tandem_cli(train("48"), tmp / "u.txt");
  EXPECT_NE(untimed.code, 0) << untimed.output;
  EXPECT_NE(untimed.output.find("train: --profile " + profile + ": plan: the profile has no time"),
            std::string::npos)
      << untimed.output;
  EXPECT_NE(untimed.output.find("--calibrate " + profile), std::string::npos) << untimed.output;
}

TEST(PlanCommand, BadInputNamesTheFlag) {
  TempDir tmp;
  const auto fails = [&](const std::string& args, const std::string& says) {
    const Result r = tandem_cli("plan " + args, tmp / "bad.txt");
    EXPECT_NE(r.code, 0) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
  };
  fails("--model cnn", "only the GPT is planned");
  fails("--model gpt --vocab-size 50 --nproc 3 --tp 2",
        "the run has 3 ranks, which is not dp x tp");
  fails("--model gpt --vocab-size 50 --n-experts 4", "--n-experts is not planned");
  fails("--model gpt --vocab-size 50 --nproc 0", "--nproc");
  fails("--model gpt --vocab-size 50 --amp bf16", "--amp bf16 is not rehearsed yet");
  fails("--model gpt --vocab-size 50 --memory 12XB", "--memory 12XB is not a size");
  fails("--model gpt --vocab-size 50 --pipeline cpu:0,cpu:1", "--pipeline (one process over");
  std::ofstream(tmp / "bad.profile") << "machine\tx\nkernel\tfast\t1\tgemm\n";
  fails("--model gpt --vocab-size 50 --profile " + (tmp / "bad.profile").string(),
        (tmp / "bad.profile").string() + ":2: 'fast' is not a number");
  fails("--model gpt --vocab-size 50 --profile " + (tmp / "none.profile").string(),
        "cannot read the profile " + (tmp / "none.profile").string());
  fails("--model gpt --vocab-size 50 --profile a --calibrate b", "excludes");
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {" --amp bf16", "train: --predict with --amp bf16"},
           {" --n-experts 4", "train: --predict with --n-experts"}}) {
    const Result r = tandem_cli("train --model gpt --predict" + flags, tmp / "early.txt");
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("parameters"), std::string::npos) << r.output;  // nothing built
  }
  const Result alone = tandem_cli("train --model gpt --profile host.profile", tmp / "alone.txt");
  EXPECT_NE(alone.code, 0) << alone.output;
  EXPECT_NE(alone.output.find("--profile requires --predict"), std::string::npos) << alone.output;
  const Result image = tandem_cli("train --model cnn --predict", tmp / "image.txt");
  EXPECT_NE(image.code, 0) << image.output;
  EXPECT_NE(image.output.find("--predict does not apply to --model cnn"), std::string::npos)
      << image.output;
}

}  // namespace
