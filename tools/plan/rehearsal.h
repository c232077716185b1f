// tools/plan/rehearsal.h — a training run's memory, predicted by rehearsing two of its steps on
// the meta device (core/device.h): every rank a thread over meta:<rank>, running the trainer's own
// code (gpt_rank.h builds and places the model, step.h trains) with no value computed or stored.
// Each tensor the run would allocate is allocated in shape and dtype only and counted, so each
// rank's counts are what its device would hold, term by term (memory_probe.h), in every mode and
// combination the trainer runs: DDP, ZeRO-1/2, fully_shard, tensor and sequence parallelism,
// context parallelism, pipelines with any schedule, activation checkpointing.
// torchtitan once estimated memory the same way (FakeTensorMode over a fake process group).
//
// What it leaves out: the gradient clip's norms (a few numbers); autocast does not run on meta yet,
// so --amp is refused; a mixture of experts routes by its values, so --n-experts is refused. The
// ranks meet through parallel/comm/rehearsal_communicator.h: a collective on meta moves and
// allocates nothing, as a transport's own buffers (shared memory's segments) are not the device's.
// The thread ranks reduce DDP's buckets in place, as shared memory does (Gloo adds a copy of the
// gradients: parallel/ddp/state_bytes.h).
#pragma once

#include <string>
#include <vector>

#include "../commands.h"
#include "../train/memory_probe.h"
#include "step_trace.h"

namespace tandem::tools {

struct RankMemory {
  int rank = 0;
  std::string where;  // the rank's place in the mesh, "dp 0, pp 1, tp 0" (empty: no mesh)
  MemoryTerms terms;
  // What the rank put on the wire in the second step, over every group it is in (the ring
  // algorithms' bytes, as CommStats counts them for every backend).
  uint64_t wire_bytes = 0;
  // The second step's kernels and collectives in order, when the rehearsal was given a CallTable
  // (the time model's input: step_time.h).
  RankTrace trace;
};

/// The memory of each of `world` ranks training the GPT of `options` (resolved, with --ddp for
/// world > 1) on a vocabulary of `characters` tokens. ValueError for a layout the trainer
/// refuses, or for --amp or --n-experts. With `calls`, each rank's trace of its second step too,
/// its kernels entered in `calls`.
std::vector<RankMemory> rehearse_gpt(const TrainOptions& options, int64_t characters, int world,
                                     std::shared_ptr<CallTable> calls = nullptr);

}  // namespace tandem::tools
