// tools/plan/plan_command.cpp — `tandem plan`: a `tandem train --model gpt` run's flags and its
// number of ranks in, each rank's memory out, rehearsed on the meta device (rehearsal.h).
#include <tandem/core/check.h>
#include <tandem/data/text_dataset.h>
#include <cstdio>

#include "../train/config.h"
#include "memory_table.h"
#include "rehearsal.h"

namespace tandem::tools {

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
  const std::vector<RankMemory> ranks = rehearse_gpt(o, characters, p.nproc);
  int64_t most = 0;
  for (const RankMemory& r : ranks) most = std::max(most, r.terms.peak);
  std::printf(
      "tandem plan: gpt, %lld layers, %lld heads, %lld wide, context %lld, vocabulary %lld, "
      "batch %lld, on %d rank%s; each rank's memory, rehearsed on the meta device:\n%s"
      "the most any rank needs: %.3f MiB (peak allocated; the allocator's cache comes on top)\n",
      (long long)o.gpt.n_layer, (long long)o.gpt.n_head, (long long)o.gpt.n_embd,
      (long long)o.gpt.block_size, (long long)characters, (long long)o.batch_size, p.nproc,
      p.nproc == 1 ? "" : "s", memory_table(ranks).c_str(), double(most) / double(1 << 20));
  return 0;
}

}  // namespace tandem::tools
