// tests/parallel/token_batch.h — random token windows for the GPT tests: `batch` rows of T ids
// below `vocab`, and each id's next token, as the GPT trains on them.
#pragma once

#include <tandem/tandem.h>
#include <utility>
#include <vector>

namespace tandem::testing {

inline std::pair<Tensor, Tensor> random_token_batch(int64_t batch, int64_t T, int64_t vocab,
                                                    uint64_t seed) {
  std::vector<int64_t> ids;
  data::SplitMix64 rng(seed);
  for (int64_t i = 0; i < batch * (T + 1); ++i) ids.push_back(int64_t(rng.next() % vocab));
  const Tensor tokens = from_vector(ids, {batch, T + 1});
  return {tokens.narrow(1, 0, T).contiguous(), tokens.narrow(1, 1, T).contiguous()};
}

}  // namespace tandem::testing
