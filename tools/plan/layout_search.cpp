// tools/plan/layout_search.cpp — enumerate, rehearse, sort.
#include <tandem/core/check.h>
#include <algorithm>
#include <cstdio>

#include "../train/config.h"
#include "layout_search.h"

namespace tandem::tools {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

std::string mib(int64_t bytes) {
  char buf[32];
  const double m = double(bytes) / double(1 << 20);
  std::snprintf(buf, sizeof buf, m < 10 ? "%.3f MiB" : "%.1f MiB", m);
  return buf;
}

// The layout's options and the flags that give them, from `base` with every layout flag reset.
PlannedLayout layout(TrainOptions o, int tp, int pp, int cp, bool sp, int zero, bool checkpointed,
                     const std::string& schedule, int64_t chunks) {
  o.tp = tp, o.pp = pp, o.cp = cp, o.ep = 1, o.dp = 0;
  o.sequence_parallel = sp, o.zero = zero, o.activation_checkpointing = checkpointed;
  o.pipeline_schedule = pp > 1 ? schedule : "gpipe", o.chunks = pp > 1 ? chunks : 4;
  o.virtual_stages = 0;
  std::string f;
  const auto add = [&](const std::string& s) { f += (f.empty() ? "" : " ") + s; };
  if (tp > 1) add(str("--tp ", tp));
  if (sp) add("--sequence-parallel");
  if (cp > 1) add(str("--cp ", cp));
  if (pp > 1) add(str("--pp ", pp, " --chunks ", chunks, " --pipeline-schedule ", schedule));
  if (zero > 0) add(str("--zero ", zero));
  if (checkpointed) add("--activation-checkpointing");
  if (f.empty()) add(o.ddp ? "--ddp" : "(one device)");
  return {.flags = f, .options = o, .worst = {}};
}

}  // namespace

std::vector<PlannedLayout> search_layouts(const TrainOptions& base, int64_t characters, int world,
                                          int* refused, std::shared_ptr<CallTable> calls) {
  std::vector<PlannedLayout> candidates;
  for (int tp : divisors(world))
    for (int cp : divisors(world / tp))
      for (int pp : divisors(world / (tp * cp))) {
        const int dp = world / (tp * cp * pp);
        for (bool sp : {false, true}) {
          if (sp && tp == 1) continue;
          for (int zero = 0; zero <= 3; ++zero) {
            if (zero > 0 && dp * cp == 1) continue;
            for (bool checkpointed : {false, true}) {
              if (pp == 1) {
                candidates.push_back(layout(base, tp, pp, cp, sp, zero, checkpointed, "", 0));
                continue;
              }
              for (const char* schedule :
                   {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev"})
                for (int64_t chunks : {int64_t(pp), int64_t(2 * pp)})
                  candidates.push_back(
                      layout(base, tp, pp, cp, sp, zero, checkpointed, schedule, chunks));
            }
          }
        }
      }
  std::vector<PlannedLayout> out;
  *refused = 0;
  for (PlannedLayout& c : candidates) {
    std::vector<RankMemory> ranks;
    try {
      c.options = resolve_config(c.options);
      ranks = rehearse_gpt(c.options, characters, world, calls);
    } catch (const Error&) {  // a layout the trainer refuses (a rank's error names the flag)
      ++*refused;
      continue;
    }
    c.worst = *std::max_element(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) {
      return a.terms.peak < b.terms.peak;
    });
    for (const RankMemory& r : ranks) c.wire_bytes = std::max(c.wire_bytes, r.wire_bytes);
    for (RankMemory& r : ranks) c.traces.push_back(std::move(r.trace));
    out.push_back(std::move(c));
  }
  return out;
}

std::string layouts_table(std::vector<PlannedLayout> layouts, int64_t memory) {
  std::stable_sort(layouts.begin(), layouts.end(), [&](const auto& a, const auto& b) {
    const bool fa = memory == 0 || a.worst.terms.peak <= memory;
    const bool fb = memory == 0 || b.worst.terms.peak <= memory;
    if (a.time && fa != fb) return fa;
    if (a.time && fa) return a.time->step < b.time->step;
    return a.worst.terms.peak < b.worst.terms.peak;
  });
  std::string out;
  int fit = 0;
  for (const PlannedLayout& l : layouts) {
    const bool fits = memory == 0 || l.worst.terms.peak <= memory;
    fit += fits;
    char wire[32];
    std::snprintf(wire, sizeof wire, "%.3f MB", double(l.wire_bytes) / 1e6);
    std::string step;
    if (l.time) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%9.2f ms  %4.1f%% comm  ", l.time->step * 1e3,
                    100 * l.time->communication_share());
      step = buf;
    }
    out += str("  ", step, mib(l.worst.terms.peak),
               memory == 0 ? ""
               : fits      ? "  fits"
                           : "  too big",
               "  ", wire, " on the wire  ", l.flags, "\n");
  }
  if (memory > 0 && fit == 0 && !layouts.empty()) {
    const PlannedLayout& c = layouts.front();
    const MemoryTerms& t = c.worst.terms;
    out += str("no layout fits in ", mib(memory), ". The closest, ", c.flags, ", needs ",
               mib(t.peak), " on rank ", c.worst.rank, ": ", mib(t.peak - memory),
               " too much (placed ", mib(t.placed), " + optimizer ", mib(t.optimizer()),
               " + in step ", mib(t.in_step()), ")\n");
  } else if (memory > 0) {
    out += str(fit, " of ", layouts.size(), " layouts fit in ", mib(memory), "\n");
  }
  return out;
}

}  // namespace tandem::tools
