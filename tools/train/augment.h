// tools/train/augment.h — data augmentation for `tandem train --augment N`: each image is shifted
// by a random (dx, dy) in [−N, N]², the uncovered border filled with the background value. The
// shifts come from a private splitmix64 stream seeded by (seed, epoch, batch index) — never from
// the global generator — so a resumed run sees exactly the images an uninterrupted one saw.
#pragma once

#include <tandem/core/tensor.h>
#include <cstdint>

namespace tandem::tools {

/// The augmentation seed of batch `batch` of epoch `epoch` (0-based) in a run seeded `seed`.
uint64_t augment_seed(uint64_t seed, int64_t epoch, int64_t batch);

/// x [B, C, H, W] float32 on the CPU shifted per image by up to `max_shift` pixels in each
/// direction, with `fill` where no source pixel lands (the normalised value of a black pixel).
/// Returns x itself when max_shift is 0.
Tensor random_translate(const Tensor& x, int max_shift, float fill, uint64_t seed);

}  // namespace tandem::tools
