// parallel/fsdp/fsdp_state.h — what a FullyShardedModule shares with the hooks it leaves in the
// graph (pre-backward hooks on the units' outputs, saved-tensor notes, the end-of-backward
// callback): the units, which module fields hold which parameter, and this iteration's progress.
// The hooks hold it weakly, so a graph that outlives the module fails with a clear error.
#pragma once

#include <tandem/parallel/fsdp/fully_shard.h>
#include <any>
#include <atomic>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

namespace tandem::parallel {

struct FullyShardedModule::State {
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();
  // A module field (Linear::weight, …) that holds a parameter: the shard between steps, the
  // whole tensor while its item computes.
  struct Slot {
    Tensor* tensor;
    size_t unit, index;
  };

  FullyShardOptions options;
  std::shared_ptr<Communicator> group;
  std::shared_ptr<PlacementTable> placements;       // the shards' records
  std::vector<std::shared_ptr<ShardedUnit>> units;  // items' units in item order, then the root
  size_t root = kNone;                              // the unit of tensors several items share
  std::vector<size_t> item_unit;                    // item -> its unit (kNone: no parameters)
  std::vector<std::vector<Slot>> item_slots;        // item -> the fields it reads
  std::vector<size_t> order;                        // reduce-scatter order: last unit first
  std::mutex mutex;  // forward on the caller's thread, backward on the device's
  std::atomic<bool> sync{true};
  // Whether the next backward is the step's last (set_is_last_backward): only then are units
  // whose gradients did not all arrive reduced anyway, and the iteration's counts forgotten.
  std::atomic<bool> last_backward{true};
  bool callback_queued = false;  // in a backward pass: end_of_backward() is queued
  size_t next_launch = 0;        // into `order`
  std::deque<size_t> reducing;   // units whose reduce-scatter is on the wire, oldest first

  void wire_units(const std::shared_ptr<State>& self);
  size_t next_unit(size_t u) const;
  void install(size_t item);  // the item's fields := whole parameters
  void restore(size_t item);  // the item's fields := shards
  void begin_forward();
  void recover_from_failed_backward();
  static std::function<std::any(const Tensor&)> pack_hook(const std::shared_ptr<State>& self,
                                                          size_t u);
  static std::function<Tensor(const std::any&)> unpack_hook(const std::shared_ptr<State>& self);
  void queue_end_of_backward(const std::weak_ptr<State>& self);
  void before_backward(const std::weak_ptr<State>& self, size_t u);
  void unit_complete();
  void launch_ready(bool all);  // reduce-scatters, in order; `all`: complete or not
  void end_of_backward();
};

}  // namespace tandem::parallel
