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
  run_shape[1] = chunk;
  run_shape.erase(run_shape.begin());  // [chunk, ...]: one row's run
  NoGradGuard no_grad;
  Tensor out = empty(shape, options);
  for (int64_t b = 0; b < rows; ++b)
    for (size_t i = 0; i < chunks.size(); ++i) {
      // Row b's positions [id·chunk, (id + 1)·chunk) start at this counter on one device.
      const uint64_t first = all.offset + uint64_t((b * whole + chunks[i] * chunk) * inner);
      const ReplayGenerators run({{options.device, {all.seed, first}}}, {}, /*noted=*/false);
      out.select(0, b).narrow(0, int64_t(i) * chunk, chunk).copy_(rand(run_shape, options));
    }
  return out;
}

}  // namespace tandem::parallel::cp
