// tools/train/augment.cpp — random translation, a per-image integer shift done with row copies.
// Integer shifts need no interpolation, so the result is exact and identical on every machine.
#include <tandem/core/check.h>
#include <tandem/data/shuffle.h>
#include <algorithm>
#include <cstring>

#include "augment.h"

namespace tandem::tools {

uint64_t augment_seed(uint64_t seed, int64_t epoch, int64_t batch) {
  // Hash each component in turn, so nearby (epoch, batch) pairs give unrelated streams, and the
  // stream differs from the DataLoader's shuffle seed for the same (seed, epoch).
  uint64_t h = data::mix64(seed ^ 0x61756731ULL);  // "aug1"
  h = data::mix64(h ^ uint64_t(epoch));
  return data::mix64(h ^ uint64_t(batch));
}

Tensor random_translate(const Tensor& x, int max_shift, float fill, uint64_t seed) {
  if (max_shift == 0) return x;
  TD_CHECK_VALUE(max_shift > 0, "random_translate: max_shift must be >= 0, but got ", max_shift);
  TD_CHECK_SHAPE(x.dim() == 4, "random_translate: expected images [B, C, H, W], but got ",
                 x.shape());
  TD_CHECK_DEVICE(x.device().is_cpu(), "random_translate: expected a CPU batch, but got one on ",
                  x.device());
  const Tensor src = x.contiguous();
  const int64_t b = src.size(0), c = src.size(1), h = src.size(2), w = src.size(3);
  Tensor out = full(src.shape(), fill, src.options());

  // Draw every image's shift up front, in image order: the stream, not thread timing, decides.
  data::SplitMix64 rng(seed);
  const uint64_t span = uint64_t(2 * max_shift + 1);
  std::vector<int64_t> dx(static_cast<size_t>(b)), dy(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    dx[size_t(i)] = int64_t(rng.next() % span) - max_shift;
    dy[size_t(i)] = int64_t(rng.next() % span) - max_shift;
  }

  const float* in = src.data<float>();
  float* o = out.data<float>();
  // Output pixel (r, col) takes input (r − dy, col − dx) where that is inside the image.
  // (A batch is a few hundred KiB: one thread copies it in microseconds.)
  for (int64_t i = 0; i < b; ++i) {
    const int64_t sx = dx[size_t(i)], sy = dy[size_t(i)];
    const int64_t c0 = std::max<int64_t>(0, sx), c1 = std::min(w, w + sx);
    if (c1 <= c0) continue;  // shifted out entirely (only when max_shift >= the width)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float* plane = in + (i * c + ch) * h * w;
      float* dst = o + (i * c + ch) * h * w;
      for (int64_t r = std::max<int64_t>(0, sy); r < std::min(h, h + sy); ++r)
        std::memcpy(dst + r * w + c0, plane + (r - sy) * w + (c0 - sx),
                    size_t(c1 - c0) * sizeof(float));
    }
  }
  return out;
}

}  // namespace tandem::tools
