// autograd/autocast.h — mixed precision for a scope, as torch.autocast:
//
//   {
//     AutocastGuard autocast(DeviceType::CPU, kBFloat16);
//     Tensor loss = cross_entropy(model(x), y);   // linear/conv in bfloat16, the loss in float32
//   }
//   loss.backward();                              // gradients arrive in float32 on the parameters
//
// Inside the guard each op casts its floating inputs on that device type before it runs, by three
// lists (PyTorch's, shortened to the ops Tandem has):
// - lower precision: matmul, linear, conv2d run in the guard's dtype (the tensor cores' and
//   AVX512-BF16's type);
// - float32: softmax, log_softmax, cross_entropy, nll_loss, mse_loss, sum, mean, exp, log, pow
//   run in float32, where a 16-bit result would lose too much (sums of many terms, exponentials).
//   cross_entropy does so without a cast: its kernels read 16-bit logits in place and compute in
//   float32, the same numbers without a float32 copy of a GPT's largest activation;
// - promote: the other ops of two or more tensors (add, sub, mul, div, maximum, minimum, where,
//   cat) run in the widest floating dtype among their inputs.
// Everything else runs in whatever dtype its input has. float64 tensors are never cast.
//
// The casts are ordinary differentiable .to(dtype) calls, so parameters stay float32 and their
// gradients come back float32. A parameter (a leaf that requires grad) is cast once per region,
// not once per use: the region's cache keeps the cast, and the outermost guard's end drops it.
// The state is per thread and follows work into backward workers, DataParallel replicas,
// pipeline stages and checkpoint recomputation (autograd/thread_local_state.h).
#pragma once

#include <tandem/core/device.h>
#include <tandem/core/tensor.h>
#include <array>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

namespace tandem {

class AutocastCache;  // autocast.cpp

/// One thread's autocast settings: per device type, on or off and the dtype; plus the region's
/// cast cache (shared with the threads the region's work runs on).
struct AutocastState {
  std::array<bool, 2> enabled{};                        // by DeviceType
  std::array<DType, 2> dtype{DType::bf16, DType::f16};  // CPU's and CUDA's defaults, as PyTorch
  std::shared_ptr<AutocastCache> cache;                 // set while any device type is enabled

  /// The calling thread's state, and setting it (ThreadLocalState uses these).
  static AutocastState current();
  static void set_current(AutocastState state);
};

/// Autocast for `device_type` in `dtype` (bfloat16 or float16) for the guard's scope; nested
/// guards override and restore. `enabled = false` turns it off for the scope.
class AutocastGuard {
 public:
  AutocastGuard(DeviceType device_type, DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  AutocastState previous_;
};

namespace autocast {

/// Whether autocast is on for device type t on this thread, and its dtype.
bool is_enabled(DeviceType t);
DType dtype(DeviceType t);
/// Casts made for parameters in this region so far (each parameter and dtype once), for tests.
size_t cached_casts();

// The three lists, for the ops: each returns the inputs cast as its list says, or nothing when
// autocast is off or nothing needs a cast (the op then runs as is).
std::optional<std::vector<Tensor>> lower_precision(std::initializer_list<Tensor> inputs);
std::optional<std::vector<Tensor>> float32(std::initializer_list<Tensor> inputs);
std::optional<std::vector<Tensor>> promote(std::initializer_list<Tensor> inputs);
std::optional<std::vector<Tensor>> promote(const std::vector<Tensor>& inputs);

}  // namespace autocast
}  // namespace tandem
