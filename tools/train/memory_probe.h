// tools/train/memory_probe.h — what a rank's device holds at the three points of a run that name
// its memory: once the model is placed, between two steps, and at the second step's peak. The
// trainer reads them on its device (`tandem train --predict`) and the planner on the meta device
// (tools/plan/rehearsal.h), at the same points of the same code, so the two are comparable term
// by term. Bytes are counted from the probe's start (what was held before is not the run's).
//
//   placed      the rank's parameters, and what its wrappers allocate once (DDP's buckets, ZeRO's
//               flat shards, fully_shard's shards)
//   between     after the second step's zero_grad: the above, plus the optimizer's state (made by
//               the first step) and what persists from step to step
//   peak        the second step's high-water mark: the above, plus activations, gradients and
//               everything a step holds for a moment (temporaries, buffers on the wire)
// The second step is the steady one: the first also makes the optimizer's state.
#pragma once

#include <tandem/core/memory_stats.h>
#include <cstdint>

namespace tandem::tools {

struct MemoryTerms {
  int64_t placed = 0, between = 0, peak = 0;
  int64_t optimizer() const { return between - placed; }  // state the first step made
  int64_t in_step() const { return peak - between; }      // what the step adds at its peak
};

class MemoryProbe {
 public:
  explicit MemoryProbe(Device device)
      : device_(device), start_(memory_stats(device).allocated_bytes) {}

  /// The model is placed and wrapped, its optimizer made.
  void placed() { terms_.placed = held(); }
  /// A step begins (after zero_grad): the second one's start is `between`, and its peak counts
  /// from here.
  void step_begins() {
    if (++steps_ != 2) return;
    terms_.between = held();
    reset_peak_memory_stats(device_);
  }
  /// A step's update is done.
  void step_ends() {
    if (steps_ == 2) terms_.peak = memory_stats(device_).peak_allocated_bytes - start_;
  }
  /// Whether the second step has ended (the terms are all read).
  bool done() const { return steps_ >= 2 && terms_.peak > 0; }
  const MemoryTerms& terms() const { return terms_; }

 private:
  int64_t held() const { return memory_stats(device_).allocated_bytes - start_; }
  Device device_;
  int64_t start_;
  int steps_ = 0;
  MemoryTerms terms_;
};

}  // namespace tandem::tools
