// core/kernels/cpu/weight_cache.h — packed copies of the weights that float32 products meet again.
//
// A pipeline multiplies every weight by each of its M micro-batches between two optimizer steps:
// in backward, dx = dy·W for each micro-batch's few rows. oneDNN's float32 kernels read a
// right-hand operand fastest in their own blocked layout; handed a plain row-major matrix they
// work through it row by row at a stride of its whole width (8 KiB for a 2048-wide weight), and a
// 64-row product against a 2048×2048 weight takes 1.2× its share of the whole batch's time. A
// packed copy costs one pass over the weight (a quarter of one such product), so it pays when the
// weight is met several times unchanged.
//
// So the CPU GEMM keeps a small cache, private to it (gemm_onednn.cpp): a float32 product that
// oneDNN runs, whose right-hand operand is a plain (untransposed) 2-D matrix of at least 2^18
// elements, looks the operand up by its storage, offset, shape and version counter. The first two
// uses read it as it is; the third packs it and keeps the copy; later ones reuse the copy. A write
// that bumps the version (every in-place op and optimizer step does) makes the copy stale: the
// operand counts as new again, and if it was used three or more times at its last version it is
// packed at its second use this time (step after step, a pipeline's weights meet every one of its
// M micro-batches). Nothing outside the GEMM knows: a pipeline step just meets its weights M
// times, while ordinary training (one dy·W per weight per step) never packs.
//
// The version counter is the whole guard: a write through a raw pointer that does not bump it
// would leave a stale copy. Kernels only write their outputs, which are fresh tensors; in-place
// ops, optimizers and collectives (a DDP broadcast of the parameters) bump the version. Copies are
// oneDNN's memory, outside Tandem's device statistics, at most kWeightCacheBytes in all (least
// recently used go first); a packed product is the same bits as the plain one
// (tests/core/weight_cache_test.cpp). TANDEM_PACK_WEIGHTS=0 turns the cache off (read at the first
// product).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::cpu {

/// The most memory the copies (spare ones included) may hold.
inline constexpr size_t kWeightCacheBytes = size_t(512) << 20;

struct WeightCacheStats {
  int64_t packs = 0;   // operands packed since the process started (or clear_weight_cache)
  size_t bytes = 0;    // held by copies, spare ones included
  size_t entries = 0;  // operands being counted
};
WeightCacheStats weight_cache_stats();

/// Forgets every operand and frees every copy (for tests, and to give the memory back).
void clear_weight_cache();

/// Off: every product reads its operand as it is. Default: on unless TANDEM_PACK_WEIGHTS=0.
void set_weight_cache_enabled(bool on);
bool weight_cache_enabled();

}  // namespace tandem::cpu
