// core/weight_packing.h — packing a weight once for the many small products that read it.
//
// A pipeline multiplies every weight by each of its M micro-batches between two optimizer steps:
// in backward, dx = dy·W for each micro-batch's few rows. oneDNN's float32 kernels read a
// right-hand operand fastest in their own blocked layout; handed a plain row-major matrix they
// work through it row by row at a stride of its whole width (8 KiB for a 2048-wide weight), and a
// 64-row product against a 2048×2048 weight takes 1.2× its share of the whole batch's time. A
// repacked copy costs one pass over the weight (a quarter of one such product), so it pays from the
// second product on.
//
// While a WeightPacking is current on a thread, a float32 product that oneDNN runs there, whose
// right-hand operand is a plain (untransposed) 2-D matrix of at least 2^18 elements, looks the
// operand up by its storage, offset, shape and version: the first product reads it as it is, the
// second packs it and keeps the copy, the later ones reuse that. A write that bumps the storage's
// version (every in-place op and optimizer step does) makes the copy stale, and the operand is
// packed again on its next repeat. reset() forgets every copy; their memory stays for the next
// ones (fresh pages cost more to fault in than the copy itself). The copies are oneDNN's memory,
// outside Tandem's device statistics: `bytes()` says how much, at most `max_bytes`.
//
// It is meant for a region in which the weights stay put: Pipeline keeps one and resets it at the
// start of every training step of 3 or more micro-batches, and ThreadLocalState carries it into
// the stages and backward threads. A write that bypasses the version counter (raw pointers) inside
// such a region would go unseen. Products elsewhere (transposed weights, as in a forward's x·Wᵀ,
// whose repacking is a transpose three times as slow; batched products; float64; CPUs without
// AVX-512) are unaffected. A packed product may differ from the plain one in the last bits (another
// kernel's summation).
//
//   auto packing = std::make_shared<WeightPacking>();
//   WeightPackingGuard guard(packing);
//   for (...) loss_i.backward();   // dy_i·W: packs W at i = 1, reuses it after
//   packing->reset();              // before the weights change
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tandem {

class WeightPacking {
 public:
  explicit WeightPacking(size_t max_bytes = size_t(1) << 30);
  ~WeightPacking();
  WeightPacking(const WeightPacking&) = delete;
  WeightPacking& operator=(const WeightPacking&) = delete;

  /// How many times an operand was packed (since construction, across resets), and the bytes the
  /// copies hold (spare ones included).
  int64_t packs() const;
  size_t bytes() const;
  /// Forgets every copy, keeping their memory; call it when no product is running.
  void reset();

  /// The calling thread's packing, or null. It follows work into backward threads
  /// (ThreadLocalState).
  static std::shared_ptr<WeightPacking> current();
  static void set_current(std::shared_ptr<WeightPacking> packing);

  struct State;  // the entries (core/kernels/cpu/weight_packing.cpp)
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

/// Makes `packing` the calling thread's for the scope (null: none) and restores the previous one.
class WeightPackingGuard {
 public:
  explicit WeightPackingGuard(std::shared_ptr<WeightPacking> packing);
  ~WeightPackingGuard();
  WeightPackingGuard(const WeightPackingGuard&) = delete;
  WeightPackingGuard& operator=(const WeightPackingGuard&) = delete;

 private:
  std::shared_ptr<WeightPacking> previous_;
};

}  // namespace tandem
