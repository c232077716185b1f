// core/kernels/meta_calls.h — the meta device's kernel calls, told to a recorder. A kernel on
// meta computes nothing (meta/registry.cpp); with a recorder attached to meta:N it also says what
// it would have run there: its signature (the label, shapes and flags a kernel's time depends
// on), the bytes its tensors span, a matrix product's flops, and, on request, a Replay that runs
// the same call for real on another device with placeholder values. tandem plan's time model
// (tools/plan/) rehearses a step on meta, then times each distinct call once on the host: the
// compute a layout costs, from the kernels it would call, at the shapes it would call them with.
//   struct Count : meta_calls::Recorder { void record(const Call& c, ...) override { ... } };
//   meta_calls::attach(0, &count);  ...a step on meta:0...;  meta_calls::attach(0, nullptr);
#pragma once

#include <tandem/core/device.h>
#include <tandem/core/dtype.h>
#include <tandem/core/shape.h>
#include <atomic>
#include <functional>
#include <string>

namespace tandem {
class Tensor;
}

namespace tandem::meta_calls {

struct Call {
  std::string label;      // "gemm float32": kernel_profile's row for the call (profile.h)
  std::string signature;  // the label, shapes and flags: "gemm float32 [64,128] [128,384] ... F T"
  double bytes = 0;       // what its tensor arguments span
  double flops = 0;       // a matrix product's 2·M·N·K; 0 for the others
};

/// Runs the call once on the tensors a Replay made.
using Prepared = std::function<void()>;
/// Makes the call's tensors on `where` (floating ones filled with 0.5, the others with 0: valid
/// ids, targets and indices) and returns the call on them.
using Replay = std::function<Prepared(Device where)>;

class Recorder {
 public:
  virtual ~Recorder() = default;
  /// One call on the meta device the recorder is attached to, from whichever thread made it
  /// (a rank's, its backward's). `replay()` copies the call's shapes into a Replay: ask for it
  /// once per signature.
  virtual void record(const Call& call, const std::function<Replay()>& replay) = 0;
};

/// Tells `recorder` every kernel call on meta:<index> from now on; nullptr stops. The recorder
/// must outlive its attachment.
void attach(int index, Recorder* recorder);

/// Seconds one run of `replay` takes on `where` (a CPU device): after a warm-up, the least of
/// three means over enough runs to last a millisecond each.
double time_replay(const Replay& replay, Device where);

/// What a tensor argument is, without its storage (a recorder must not keep meta memory alive).
struct TensorSpec {
  bool defined = false;
  Shape shape;
  Strides strides;
  DType dtype = DType::f32;
};
TensorSpec spec_of(const Tensor& t);
/// A tensor on `where` laid out as `spec` says, filled as Replay's are.
Tensor placeholder(const TensorSpec& spec, Device where);

namespace detail {
inline std::atomic<int> g_attached{0};  // recorders attached: 0 keeps a meta kernel at one load
Recorder* recorder(int index);
}  // namespace detail

}  // namespace tandem::meta_calls
