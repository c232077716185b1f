// parallel/cp/positional_random.cpp — a rank's runs of one device's counters, each drawn by rand()
// from a generator that starts at the run.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/generator.h>
#include <tandem/parallel/cp/positional_random.h>

namespace tandem::parallel::cp {

Tensor positional_uniforms(const Shape& shape, const TensorOptions& options, int64_t rank,
                           int64_t cp, SequenceSplit split) {
  TD_CHECK_SHAPE(shape.size() >= 2,
                 "context parallel: random numbers at positions need [B, T, ...], not ", shape);
  const int64_t rows = shape[0], mine = shape[1], whole = mine * cp;
  int64_t inner = 1;
  for (size_t d = 2; d < shape.size(); ++d) inner *= shape[d];
  const std::vector<int64_t> chunks = chunks_of(rank, cp, split);
  TD_CHECK_SHAPE(mine % int64_t(chunks.size()) == 0, "context parallel: this rank's ", mine,
                 " positions are not its ", chunks.size(), " equal chunks");
  const int64_t chunk = mine / int64_t(chunks.size());
  const GeneratorState all =
      reserve_random(options.device, uint64_t(rows) * uint64_t(whole) * uint64_t(inner));
  Shape run_shape = shape;
  run_shape[0] = 1, run_shape[1] = chunk;
  NoGradGuard no_grad;
  std::vector<Tensor> parts;
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t id : chunks) {
      // Row b's positions [id·chunk, (id + 1)·chunk) start at this counter on one device.
      const uint64_t first = all.offset + uint64_t((b * whole + id * chunk) * inner);
      const ReplayGenerators run({{options.device, {all.seed, first}}}, {}, /*noted=*/false);
      parts.push_back(rand(run_shape, options));
    }
  // [rows · chunks, 1, chunk, ...] in row-major order: row b's chunks side by side.
  std::vector<Tensor> by_row;
  const size_t per_row = chunks.size();
  for (int64_t b = 0; b < rows; ++b) {
    std::vector<Tensor> row(parts.begin() + ptrdiff_t(size_t(b) * per_row),
                            parts.begin() + ptrdiff_t(size_t(b + 1) * per_row));
    by_row.push_back(row.size() == 1 ? row[0] : cat(row, 1));
  }
  return cat(by_row, 0);
}

}  // namespace tandem::parallel::cp
