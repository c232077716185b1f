// parallel/ddp/powersgd.h — PowerSGD (Vogels et al. 2019; PyTorch's powerSGD_hook): each
// gradient matrix M (n × m, a weight's gradient viewed as rows × the rest) is sent as two thin
// matrices instead of itself. With Q (m × r) from the last step:
//   P = M Q, all-reduced (summed)      n × r
//   P's columns orthonormalised        the same on every rank, since P is
//   Q = Mᵀ P, all-reduced (summed)     m × r
//   M ≈ P Qᵀ / world                    the average, projected on r directions
// r(n + m) numbers travel instead of n·m. Vectors (biases) and matrices too small to gain
// `min_compression_rate` travel uncompressed, in the second all-reduce. Error feedback adds
// what the approximation dropped (M - P Qᵀ, this rank's) to the next step's gradient; warm start
// reuses Q. The first `start_iter` backwards use plain all-reduce, as PyTorch's hook does.
//   DistributedDataParallel ddp(model, {.comm_hook = parallel::powersgd({.rank = 4})});
// The first all-reduce (P) is waited for inside the hook, on the backward thread.
#pragma once

#include <tandem/parallel/ddp/comm_hook.h>
#include <cstdint>

namespace tandem::parallel {

struct PowerSGDOptions {            // PyTorch's PowerSGDState defaults
  int rank = 1;                     // matrix_approximation_rank
  int start_iter = 1000;            // start_powerSGD_iter: plain all-reduce before it
  bool error_feedback = true;       // use_error_feedback
  bool warm_start = true;           // reuse Q from the previous step
  double min_compression_rate = 2;  // compress a matrix only if (n + m)·r·rate < n·m
  uint64_t seed = 0;                // Q's first values (the same on every rank)
};

std::shared_ptr<CommHook> powersgd(PowerSGDOptions options);

}  // namespace tandem::parallel
