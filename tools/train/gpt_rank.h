// tools/train/gpt_rank.h — one rank's GPT as `tandem train --model gpt` builds it: the whole model
// drawn from the seed, cut for --tp, --cp and --ep, placed for its mode (make_setup: the stage of
// --pp, DDP, ZeRO or fully_shard), and AdamW over what the rank holds. The trainer builds it on
// the run's device; the planner (tools/plan/) builds it on the meta device, to count the bytes
// the same code allocates without computing any.
#pragma once

#include <tandem/core/generator.h>
#include <tandem/nn/optim/optimizer.h>
#include <memory>
#include <string>

#include "gpt_vocabulary.h"
#include "setup.h"

namespace tandem::tools {

struct GptRank {
  Setup setup;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::shared_ptr<Generator> tp_stream;  // --tp: this rank's own dropout stream (checkpointed)
  VocabularyRows rows;                   // the token table's rows, for checkpoints
  int64_t parameters = 0;                // of the whole model, before any cut
};

/// The rank of `mesh` (null: of `group`, or the only one) with the resolved options `o`, a
/// vocabulary of `characters` tokens in a table of `vocab` rows (table_rows). The whole model is
/// drawn on `placement.device`'s type (the CPU, or the meta device: no values), then placed.
GptRank build_gpt_rank(const TrainOptions& o, int64_t characters, int64_t vocab,
                       const Placement& placement, std::shared_ptr<parallel::Communicator> group,
                       std::shared_ptr<parallel::DeviceMesh> mesh);

}  // namespace tandem::tools
