// data/distributed_sampler.cpp — permutation (shared with RandomSampler), pad or cut, stride.
#include <tandem/core/check.h>
#include <tandem/core/env.h>
#include <tandem/data/distributed_sampler.h>
#include <tandem/data/shuffle.h>
#include <numeric>

namespace tandem::data {
DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions o)
    : n_(dataset_size),
      world_(o.num_replicas >= 0 ? o.num_replicas : ::tandem::detail::env_int("WORLD_SIZE", 1)),
      rank_(o.rank >= 0 ? o.rank : ::tandem::detail::env_int("RANK", 0)),
      shuffle_(o.shuffle),
      drop_last_(o.drop_last),
      seed_(o.seed) {
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
