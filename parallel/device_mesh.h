// parallel/device_mesh.h — the ranks of a group laid out as a grid with named dimensions
// (PyTorch's DeviceMesh): for data × tensor parallelism, a 2 × 2 mesh ("dp", "tp") over 4 ranks
// puts ranks {0, 1} and {2, 3} in tensor-parallel groups and {0, 2} and {1, 3} in data-parallel
// ones. Row-major, as torch's init_device_mesh: the last dimension's neighbours are adjacent
// ranks (on a multi-GPU host, the fastest links for the chattiest dimension, tensor parallelism).
//
//   parallel::DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
//   auto model = parallel::tp::tensor_parallel_gpt(whole, mesh.group("tp"));
//   parallel::DistributedDataParallel ddp(model, {.group = mesh.group("dp")});
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <memory>
#include <string>
#include <vector>

namespace tandem::parallel {

class DeviceMesh {
 public:
  /// Every rank of `world` calls it with the same shape (whose product is world->size()) and
  /// names; each makes one sub-group per line of the grid along each dimension (new_group, in the
  /// same order everywhere) and keeps those it belongs to.
  DeviceMesh(std::shared_ptr<Communicator> world, std::vector<int> shape,
             std::vector<std::string> names);

  /// This rank's group along dimension `name`: the ranks that differ from it only there.
  const std::shared_ptr<Communicator>& group(const std::string& name) const;
  /// The ranks that differ from this one only along `names`, as one group (torchtitan's
  /// mesh["dp", "cp"]._flatten()): what data and context parallelism reduce gradients over
  /// together. Its ranks in the world's order. Collective: every rank calls it, with the same
  /// names. One name: group(name) itself.
  std::shared_ptr<Communicator> flatten(const std::vector<std::string>& names);
  /// This rank's coordinate along `name` (its rank in group(name)).
  int coordinate(const std::string& name) const;
  int size(const std::string& name) const;
  const std::shared_ptr<Communicator>& world() const { return world_; }
  /// "2 x 2 mesh (dp, tp); rank 3 at (1, 1)".
  std::string str() const;

 private:
  size_t dim(const std::string& name) const;

  std::shared_ptr<Communicator> world_;
  std::vector<int> shape_;
  std::vector<std::string> names_;
  std::vector<int> coordinates_;
  std::vector<std::shared_ptr<Communicator>> groups_;
};

}  // namespace tandem::parallel
