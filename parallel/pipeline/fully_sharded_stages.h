// parallel/pipeline/fully_sharded_stages.h — fully_shard (parallel/fsdp/fully_shard.h) under a
// pipeline: the stages of a rank wrapped as one FullyShardedModule over the data ranks, as
// torchtitan applies FSDP2 to each pipeline stage's module.
//
// Each held stage's forward runs that stage's items through fully_shard (forward_items), so its
// units gather their shards per micro-batch; their gradients accumulate over the step's
// micro-batches and are reduce-scattered once, after the rank's last backward of the step —
// whichever stage's that is. A rank of an interleaved or V schedule holds several stages, and
// under a V the first and last (the tied embedding and head: fully_shard's shared unit) sit on
// one rank; counting the backwards per rank, not per stage, covers both.
//
//   DistributedPipeline pipe(model, mesh->group("pp"), {.chunks = 4, .schedule = zb_v});
//   FullyShardedModule fsdp(model_of(pipe), {.group = mesh->group("dp")});
//   fully_shard_stages(pipe, fsdp);  // then pipe.step(...) as usual
#pragma once

#include <tandem/parallel/fsdp/fully_shard.h>
#include <tandem/parallel/pipeline/distributed_pipeline.h>

namespace tandem::parallel {

/// Runs `pipe`'s stages through `fsdp` (which wraps pipe.stage(), every held stage's modules)
/// from now on. Both must outlive the pipeline's steps.
void fully_shard_stages(DistributedPipeline& pipe, FullyShardedModule& fsdp);

}  // namespace tandem::parallel
