// data/sampler.h — which examples an epoch visits, and in what order. A sampler is a pure
// function of the epoch: indices(e) is the same every time it is asked, on every thread and
// every process, which is what makes shuffled runs reproducible and lets a distributed sampler
// give each rank its own disjoint share of the same permutation (rank r of w takes its part of
// indices(e); see DistributedSampler, which implements this interface).
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::data {

class Sampler {
 public:
  virtual ~Sampler();
  /// How many indices indices(epoch) returns; the same for every epoch.
  virtual int64_t size() const = 0;
  /// The dataset indices epoch `epoch` visits, in order. Deterministic in (the sampler's
  /// configuration, epoch) and safe to call from any thread.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
};

/// 0, 1, …, n−1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
};

/// A permutation of 0 … n−1 that depends only on (seed, epoch): a splitmix64-driven
/// Fisher–Yates shuffle (data/shuffle.h), seeded with epoch_seed(seed, epoch). Two samplers with
/// one seed agree; successive epochs differ.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  uint64_t seed() const { return seed_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

/// The shuffle seed of `epoch` for a sampler seeded with `seed`. Both are hashed (splitmix64's
/// finaliser), so nearby seeds and epochs give unrelated permutations. Shared with
/// DistributedSampler so every sampler shuffles alike.
uint64_t epoch_seed(uint64_t seed, int64_t epoch);

}  // namespace tandem::data
