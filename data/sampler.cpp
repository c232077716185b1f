// data/sampler.cpp — the sequential and the random sampler. Permutations come from data/shuffle.h,
// never from <random> or the tensor generators, so they are identical across platforms, thread
// counts and processes (a distributed run needs every rank to draw the same one).
#include <tandem/core/check.h>
#include <tandem/data/sampler.h>
#include <tandem/data/shuffle.h>
#include <numeric>

namespace tandem::data {

Sampler::~Sampler() = default;

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  TD_CHECK_VALUE(n >= 0, "SequentialSampler: expected a dataset size >= 0, but got ", n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t /*epoch*/) const {
  std::vector<int64_t> out(size_t(n_), 0);
  std::iota(out.begin(), out.end(), int64_t(0));
  return out;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  TD_CHECK_VALUE(n >= 0, "RandomSampler: expected a dataset size >= 0, but got ", n);
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  TD_CHECK_VALUE(epoch >= 0, "RandomSampler: expected an epoch >= 0, but got ", epoch);
  return random_permutation(n_, epoch_seed(seed_, epoch));
}

uint64_t epoch_seed(uint64_t seed, int64_t epoch) {
  // Hash the seed before mixing in the epoch: with a plain seed + epoch, (seed 1, epoch 0) and
  // (seed 0, epoch 1) would shuffle identically.
  return mix64(mix64(seed) ^ (uint64_t(epoch) * 0x9E3779B97F4A7C15ULL));
}

}  // namespace tandem::data
