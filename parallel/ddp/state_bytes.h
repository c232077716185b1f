// parallel/ddp/state_bytes.h — what each rank keeps between steps under DDP and ZeRO, from the
// formulas (the ZeRO paper's table 1, with Tandem's buckets; zero_shards.h). Ψ parameters of e
// bytes, an optimizer with s elements of state per parameter (Adam 2, SGD with momentum 1), N
// ranks:
//   DDP     parameters Ψe, gradients 2Ψe (.grad and its bucket copy; Ψe where the buckets are
//           reduced in place, over shared memory or threads), optimizer sΨe
//   ZeRO-1  parameters Ψe, gradients Ψe (the buckets, the averaged chunk inside), optimizer sΨe/N
//   ZeRO-2  parameters Ψe, gradients Ψe/N (the averaged chunk), optimizer sΨe/N
//   ZeRO-3  parameters Ψe/N (fully_shard's shards), gradients Ψe/N, optimizer sΨe/N
// Activations, and what a step holds for a moment (ZeRO-2's buckets on the wire, ZeRO-3's whole
// units in flight), come on top.
#pragma once

namespace tandem::parallel {

struct StateBytes {
  double parameters = 0, gradients = 0, optimizer = 0;
  double total() const { return parameters + gradients + optimizer; }
};

/// The formula above for ZeRO `stage` (0: DDP, with a bucket copy of the gradients unless
/// `bucket_copy` is false; 1; 2; 3).
StateBytes state_bytes(int stage, double parameters, double element_bytes, int state_elements,
                       int world, bool bucket_copy = true);

}  // namespace tandem::parallel
