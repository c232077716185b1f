// tools/train/setup_state.cpp — what a checkpoint takes of a setup and puts back into it: the
// whole state, or each rank's sharded part, of any layout, through the one placement table.
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/sharded_checkpoint.h>
#include <tandem/parallel/whole_state.h>

#include "setup_state.h"

namespace tandem::tools {
namespace {

// Every rank of the run; null for one process.
parallel::Communicator* world_of(const Setup& s) {
  return s.mode == Parallelism::DDP ? &parallel::default_group() : nullptr;
}

// The optimizer over the table's tensors: ZeRO's inner one holds the pieces.
optim::Optimizer& table_optimizer(Setup& s, optim::Optimizer& optimizer) {
  return s.zero ? s.zero->inner() : optimizer;
}

}  // namespace

CheckpointContent checkpoint_content(Setup& s, optim::Optimizer& optimizer) {
  parallel::Communicator* world = world_of(s);
  return {parallel::full_state_dict(*s.placements, *s.model, world),
          parallel::full_optimizer_state(*s.placements, *s.model, table_optimizer(s, optimizer),
                                         world)};
}

Restore restore_into(Setup& s, optim::Optimizer& optimizer) {
  parallel::Communicator* world = world_of(s);
  optim::Optimizer& local = table_optimizer(s, optimizer);
  Restore r{[&s, world](const nn::StateDict& sd, const std::string& path) {
              parallel::load_full_state_dict(*s.placements, *s.model, sd, world, path);
              if (s.zero) s.zero->shards().gather_parameters();  // the table lists our pieces
            },
            [&s, &local, world](const optim::OptimizerState& state) {
              parallel::load_full_optimizer_state(*s.placements, *s.model, local, state, world);
            }};
  if (world == nullptr) return r;  // a sharded checkpoint is a run of ranks'
  // A sharded checkpoint of any layout: each rank reads the elements of what it trains.
  r.sharded = [&s, &local](const std::string& dir) {
    std::map<std::string, std::string> meta;
    parallel::load_sharded_checkpoint(dir, *s.placements, s.model->named_buffers(), &local, &meta);
    if (s.zero) s.zero->shards().gather_parameters();  // the table lists this rank's pieces
    return meta;
  };
  return r;
}

ShardedContent sharded_content(Setup& s, optim::Optimizer& optimizer,
                               parallel::Communicator& world) {
  return {.world = &world,
          .table = s.placements.get(),
          .buffers = s.model->named_buffers(),
          .optimizer = &table_optimizer(s, optimizer)};
}

}  // namespace tandem::tools
