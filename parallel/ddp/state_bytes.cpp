// parallel/ddp/state_bytes.cpp — the per-rank memory formulas of DDP and ZeRO-1/2/3.
#include <tandem/core/check.h>
#include <tandem/parallel/ddp/state_bytes.h>

namespace tandem::parallel {

StateBytes state_bytes(int stage, double parameters, double element_bytes, int state_elements,
                       int world, bool bucket_copy) {
  TD_CHECK_VALUE(stage >= 0 && stage <= 3 && world >= 1, "state_bytes: stage ", stage,
                 " (0, 1, 2 or 3) and world ", world, " (>= 1)");
  const double one = parameters * element_bytes;  // a full copy of the model
  const double n = stage == 0 ? 1.0 : double(world);
  return {.parameters = stage == 3 ? one / world : one,
          .gradients = stage == 0   ? (bucket_copy ? 2 : 1) * one
                       : stage == 1 ? one
                                    : one / world,
          .optimizer = state_elements * one / n};
}

}  // namespace tandem::parallel
