// tools/plan/plan_command.cpp — `tandem plan`: a `tandem train --model gpt` run's flags and its
// number of ranks in, each rank's memory out, rehearsed on the meta device (rehearsal.h).
#include <tandem/core/check.h>
#include <tandem/data/text_dataset.h>
#include <cstdio>
#include <optional>

#include "../train/config.h"
#include "calibrate.h"
#include "layout_search.h"
#include "memory_table.h"
#include "rehearsal.h"

namespace tandem::tools {
namespace {

// "80GiB", "512 MiB", "2GB", "1e9": bytes. ValueError naming --memory otherwise.
int64_t parse_bytes(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  unit.erase(0, unit.find_first_not_of(' '));
  const std::vector<std::pair<std::string, double>> units = {
      {"", 1},       {"B", 1},         {"KB", 1e3},      {"MB", 1e6},  {"GB", 1e9},
      {"KiB", 1024}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TB", 1e12}, {"TiB", 1099511627776.0}};
  for (const auto& [name, scale] : units)
    if (used > 0 && unit == name && value > 0) return int64_t(value * scale);
  TD_CHECK_VALUE(false, "plan: --memory ", text,
                 " is not a size (a number with B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  return 0;
}

}  // namespace

int run_plan(const PlanOptions& p) {
  TrainOptions flags = p.train;
  TD_CHECK_VALUE(flags.model == "gpt", "plan: --model ", flags.model,
                 ": only the GPT is planned (give --model gpt and its sizes)");
  flags.ddp = flags.ddp || p.nproc > 1;  // as `tandem launch` runs it
  const TrainOptions o = resolve_config(flags);
  if (dry_run()) return dry_run_done("plan");
  int64_t characters = p.vocab_size;
  if (characters == 0) {  // the corpus's characters, as `tandem train` counts them
    const std::vector<std::string> files =
        o.gpt.text.empty() ? data::fortunes_files() : std::vector<std::string>{o.gpt.text};
    characters = data::load_text_corpus(files, nullptr).tokenizer.vocab_size();
  }
  const int64_t memory = p.memory.empty() ? 0 : parse_bytes(p.memory);
  std::optional<TimeModel> time;  // step times too, from a profile measured now or before
  if (!p.calibrate.empty()) {
    time.emplace();
    std::printf(
        "tandem plan: calibrating %s (kernels, the framework's cost, the cores' "
        "sharing, the links)...\n",
        this_machine().c_str());
    std::fflush(stdout);
    calibrate_compute(o, characters, p.nproc, time->profile);
  } else if (!p.profile.empty()) {
    time.emplace();
    time->profile = HostProfile::load(p.profile);
  }
  // After the rehearsals: --calibrate times the calls they made, then the links (which fork:
  // the kernels first), and saves the profile.
  const auto timed = [&]() -> std::string {
    if (p.calibrate.empty()) return "";
    time_calls(*time->calls, rank_threads(p.nproc), time->profile);
    measure_links(time->profile);
    time->profile.save(p.calibrate);
    return str("profile saved to ", p.calibrate, " (", time->profile.kernels.size(),
               " kernel calls timed)\n");
  };
  if (p.search) {  // every layout of the ranks, least memory first
    int refused = 0;
    std::vector<PlannedLayout> layouts =
        search_layouts(o, characters, p.nproc, &refused, time ? time->calls : nullptr);
    const std::string saved = timed();
    if (time)
      for (PlannedLayout& l : layouts) l.time = time->predict(l.traces);
    std::printf(
        "tandem plan: gpt, %lld layers, %lld heads, %lld wide, context %lld, vocabulary %lld, "
        "batch %lld, on %d rank%s: %zu layouts (%d more the trainer refuses), least memory "
        "first%s, each the peak of the rank that needs the most and the most bytes a rank puts "
        "on the wire in a step (rehearsed on the meta device)%s:\n%s%s",
        (long long)o.gpt.n_layer, (long long)o.gpt.n_head, (long long)o.gpt.n_embd,
        (long long)o.gpt.block_size, (long long)characters, (long long)o.batch_size, p.nproc,
        p.nproc == 1 ? "" : "s", layouts.size(), refused,
        time ? " (with times: the fastest that fit first, each its predicted step and its ranks' "
               "share of time in communication)"
             : "",
        time ? str("; times from the profile of ", time->profile.machine).c_str() : "",
        layouts_table(layouts, memory).c_str(), saved.c_str());
    return 0;
  }
  const std::vector<RankMemory> ranks =
      rehearse_gpt(o, characters, p.nproc, time ? time->calls : nullptr);
  int64_t most = 0;
  for (const RankMemory& r : ranks) most = std::max(most, r.terms.peak);
  std::printf(
      "tandem plan: gpt, %lld layers, %lld heads, %lld wide, context %lld, vocabulary %lld, "
      "batch %lld, on %d rank%s; each rank's memory, rehearsed on the meta device:\n%s"
      "the most any rank needs: %.3f MiB (peak allocated; the allocator's cache comes on top)\n",
      (long long)o.gpt.n_layer, (long long)o.gpt.n_head, (long long)o.gpt.n_embd,
      (long long)o.gpt.block_size, (long long)characters, (long long)o.batch_size, p.nproc,
      p.nproc == 1 ? "" : "s", memory_table(ranks).c_str(), double(most) / double(1 << 20));
  if (memory > 0)
    std::printf("%s in --memory %s (%.3f MiB)\n", most <= memory ? "it fits" : "it does not fit",
                p.memory.c_str(), double(memory) / double(1 << 20));
  if (time) {
    const std::string saved = timed();
    std::vector<RankTrace> traces;
    for (const RankMemory& r : ranks) traces.push_back(r.trace);
    const StepTime t = time->predict(traces);
    std::printf(
        "predicted step: %.2f ms on %s (tandem launch's ranks; communication %.1f%% of "
        "the ranks' time):\n%s%s",
        t.step * 1e3, time->profile.machine.c_str(), 100 * t.communication_share(),
        time_table(t).c_str(), saved.c_str());
  }
  return 0;
}

}  // namespace tandem::tools
