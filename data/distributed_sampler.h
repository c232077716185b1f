// data/distributed_sampler.h — each rank's share of every epoch (PyTorch's DistributedSampler).
// All ranks draw the same permutation of the dataset for (seed, epoch), pad it (or cut it, with
// drop_last) to a multiple of the world size, and rank r takes every world-th index starting at
// r, so the shares are disjoint and equal in size. A DataLoader asks for indices(its epoch), and
// its epoch advances by itself at each pass, so the order changes every epoch even without
// set_epoch (PyTorch's most common DDP mistake); loader.set_epoch(e) pins it.
// Evaluation caveat: padding repeats up to world−1 examples, so metrics summed over ranks count
// those twice; use drop_last, or evaluate on one rank, when exact numbers matter.
#pragma once

#include <tandem/data/sampler.h>

namespace tandem::data {

struct DistributedSamplerOptions {
  int64_t num_replicas = -1;  // -1: current_world() (core/world.h): the process group's world,
  int64_t rank = -1;          // else the launcher's (torchrun, mpirun, PMI, Slurm), else 0 of 1
  bool shuffle = true;
  uint64_t seed = 0;       // the same on every rank
  bool drop_last = false;  // false: pad by repeating indices; true: drop the tail
};

class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options = {});
  /// Indices per rank per epoch: ceil(n / world), or floor with drop_last.
  int64_t size() const override { return per_rank_; }
  /// This rank's indices for `epoch`.
  std::vector<int64_t> indices(int64_t epoch) const override;
  /// PyTorch's spelling, for code that draws indices itself: indices() then means indices(epoch).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  std::vector<int64_t> indices() const { return indices(epoch_); }
  int64_t epoch() const { return epoch_; }
  int64_t rank() const { return rank_; }
  int64_t num_replicas() const { return world_; }

 private:
  int64_t n_, world_, rank_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  int64_t per_rank_;
  int64_t epoch_ = 0;
};

}  // namespace tandem::data
