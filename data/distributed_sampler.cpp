// data/distributed_sampler.cpp — permutation (shared with RandomSampler), pad or cut, stride.
#include <tandem/core/check.h>
#include <tandem/core/world.h>
#include <tandem/data/distributed_sampler.h>
#include <tandem/data/shuffle.h>
#include <numeric>

namespace tandem::data {
DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions o)
    : n_(dataset_size),
      world_(o.num_replicas),
      rank_(o.rank),
      shuffle_(o.shuffle),
      drop_last_(o.drop_last),
      seed_(o.seed) {
  if (world_ < 0 || rank_ < 0) {
    // The world every other consumer sees (core/world.h): the process group's once joined, so
    // that under mpirun or srun, whose variables are not RANK and WORLD_SIZE, each rank takes
    // its own share.
    const WorldIdentity world = current_world();
    if (world_ < 0) world_ = world.world_size;
    if (rank_ < 0) rank_ = world.rank;
    TD_CHECK_VALUE(world_ != -1, "DistributedSampler: ", world.source, " sets no ",
                   world.world_variable, "\n  hint: pass num_replicas");
    TD_CHECK_VALUE(rank_ != -1, "DistributedSampler: ", world.source, " sets no ",
                   world.rank_variable, "\n  hint: pass rank");
  }
  TD_CHECK_VALUE(n_ >= 0, "DistributedSampler: expected a dataset size >= 0, but got ", n_);
  TD_CHECK_VALUE(world_ >= 1, "DistributedSampler: num_replicas must be >= 1, but got ", world_);
  TD_CHECK_VALUE(rank_ >= 0 && rank_ < world_, "DistributedSampler: rank ", rank_,
                 " is not in [0, ", world_, ")");
  per_rank_ = drop_last_ ? n_ / world_ : (n_ + world_ - 1) / world_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  TD_CHECK_VALUE(epoch >= 0, "DistributedSampler: expected an epoch >= 0, but got ", epoch);
  std::vector<int64_t> all;
  if (shuffle_) {
    all = random_permutation(n_, epoch_seed(seed_, epoch));
  } else {
    all.resize(size_t(n_));
    std::iota(all.begin(), all.end(), int64_t(0));
  }
  const int64_t total = per_rank_ * world_;
  // Pad by repeating from the start (as PyTorch), possibly more than once for tiny datasets.
  for (int64_t i = 0; int64_t(all.size()) < total && n_ > 0; ++i) all.push_back(all[size_t(i)]);
  all.resize(size_t(total));
  std::vector<int64_t> mine;
  mine.reserve(size_t(per_rank_));
  for (int64_t i = rank_; i < total; i += world_) mine.push_back(all[size_t(i)]);
  return mine;
}

}  // namespace tandem::data
