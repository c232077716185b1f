// parallel/cp/sequence_split.cpp — the contiguous and zig-zag splits of a sequence.
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/parallel/cp/sequence_split.h>

namespace tandem::parallel::cp {

int64_t chunk_count(int64_t cp, SequenceSplit split) {
  return split == SequenceSplit::ZigZag ? 2 * cp : cp;
}

std::vector<int64_t> chunks_of(int64_t rank, int64_t cp, SequenceSplit split) {
  TD_CHECK_VALUE(cp >= 1 && rank >= 0 && rank < cp, "context parallel: rank ", rank,
                 " is not in a group of ", cp);
  if (split == SequenceSplit::Contiguous) return {rank};
  return {rank, 2 * cp - 1 - rank};
}

namespace {

int64_t chunk_length(int64_t length, int64_t cp, SequenceSplit split) {
  const int64_t n = chunk_count(cp, split);
  TD_CHECK_SHAPE(length % n == 0, "context parallel: a sequence of ", length,
                 " positions does not split into ", n, " equal chunks (",
                 split == SequenceSplit::ZigZag ? "zig-zag: 2 per rank" : "one per rank", " of ",
                 cp, "); make it a multiple of ", n);
  return length / n;
}

}  // namespace

Tensor shard_sequence(const Tensor& whole, int64_t dim, int64_t rank, int64_t cp,
                      SequenceSplit split) {
  const int64_t d = dim < 0 ? dim + whole.dim() : dim;
  const int64_t c = chunk_length(whole.size(d), cp, split);
  std::vector<Tensor> parts;
  for (int64_t id : chunks_of(rank, cp, split)) parts.push_back(whole.narrow(d, id * c, c));
  return parts.size() == 1 ? parts[0].contiguous() : cat(parts, d);
}

Tensor unshard_sequence(const std::vector<Tensor>& parts, int64_t dim, SequenceSplit split) {
  const int64_t cp = int64_t(parts.size());
  TD_CHECK_VALUE(cp >= 1, "context parallel: no parts to put together");
  const int64_t d = dim < 0 ? dim + parts[0].dim() : dim;
  const int64_t per_rank = split == SequenceSplit::ZigZag ? 2 : 1;
  const int64_t c = parts[0].size(d) / per_rank;
  std::vector<Tensor> chunks(size_t(chunk_count(cp, split)));
  for (int64_t r = 0; r < cp; ++r) {
    const std::vector<int64_t> ids = chunks_of(r, cp, split);
    for (size_t i = 0; i < ids.size(); ++i)
      chunks[size_t(ids[i])] = parts[size_t(r)].narrow(d, int64_t(i) * c, c);
  }
  return cat(chunks, d);
}

std::vector<int64_t> positions_of(int64_t rank, int64_t cp, int64_t length, SequenceSplit split) {
  const int64_t c = chunk_length(length, cp, split);
  std::vector<int64_t> out;
  for (int64_t id : chunks_of(rank, cp, split))
    for (int64_t i = 0; i < c; ++i) out.push_back(id * c + i);
  return out;
}

}  // namespace tandem::parallel::cp
