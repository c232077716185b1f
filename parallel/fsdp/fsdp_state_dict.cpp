// parallel/fsdp/fsdp_state_dict.cpp — PyTorch's whole-state methods of a fully sharded model,
// over the one whole state of every layout (parallel/whole_state.h), with the module's group as
// the world: its table's shards put together on rank 0 (and sent to every rank unless
// rank0_only), or each rank's rows taken from the whole tensors.
#include <tandem/core/check.h>
#include <tandem/parallel/fsdp/fsdp_state.h>
#include <tandem/parallel/whole_state.h>

namespace tandem::parallel {
namespace {

// The device the module's collectives run on (its shards').
Device device_of(const FullyShardedModule::State& s) {
  for (const PlacedTensor& e : s.placements->entries()) return e.local.device();
  return Device::cpu();
}

}  // namespace

nn::StateDict FullyShardedModule::full_state_dict(bool rank0_only) {
  State& s = *state_;
  std::lock_guard lk(s.mutex);
  const nn::StateDict whole = parallel::full_state_dict(*s.placements, *model_, s.group.get());
  return rank0_only ? whole : broadcast_state_dict(whole, s.group.get(), device_of(s));
}

void FullyShardedModule::load_full_state_dict(const nn::StateDict& state, std::string_view source) {
  State& s = *state_;
  std::lock_guard lk(s.mutex);
  parallel::load_full_state_dict(*s.placements, *model_, state, s.group.get(), source);
}

optim::OptimizerState FullyShardedModule::full_optimizer_state_dict(
    const optim::Optimizer& optimizer, bool rank0_only) {
  State& s = *state_;
  std::lock_guard lk(s.mutex);
  const optim::OptimizerState whole =
      full_optimizer_state(*s.placements, *model_, optimizer, s.group.get());
  return rank0_only ? whole : broadcast_optimizer_state(whole, s.group.get(), device_of(s));
}

void FullyShardedModule::load_full_optimizer_state_dict(optim::Optimizer& optimizer,
                                                        const optim::OptimizerState& state) {
  State& s = *state_;
  std::lock_guard lk(s.mutex);
  load_full_optimizer_state(*s.placements, *model_, optimizer, state, s.group.get());
}

}  // namespace tandem::parallel
