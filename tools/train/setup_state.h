// tools/train/setup_state.h — what --checkpoint, --resume and --sharded-checkpoint take of a
// setup and put back into it, for every layout.
#pragma once

#include "checkpointing.h"
#include "setup.h"

namespace tandem::tools {

/// What --checkpoint saves: the model's and optimizer's whole state, one device's, put together
/// from every rank's parts as the placement table records them (parallel/whole_state.h).
/// Collective in a run of ranks (every rank calls it; rank 0 holds the result and saves it).
CheckpointContent checkpoint_content(Setup& s, optim::Optimizer& optimizer);
/// How --resume puts a checkpoint back, whole or sharded, of any layout: each rank takes the
/// elements of what it trains. Collective in a run of ranks.
Restore restore_into(Setup& s, optim::Optimizer& optimizer);

/// What --sharded-checkpoint saves of this rank: its placement table's tensors, the model's
/// buffers, and the optimizer over the table's tensors (under ZeRO-1/2 its inner optimizer).
ShardedContent sharded_content(Setup& s, optim::Optimizer& optimizer,
                               parallel::Communicator& world);

}  // namespace tandem::tools
