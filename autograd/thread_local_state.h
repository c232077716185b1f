// autograd/thread_local_state.h — the per-thread settings that must follow work into the threads
// Tandem starts (backward workers, DataLoader workers, DataParallel's replica threads): grad
// mode, the non-blocking-copies flag, the current CUDA streams, the saved-tensor hooks, the cap
// on intra-op threads, autocast, the weight-gradient deferral and the weight packing. As PyTorch's
// at::ThreadLocalState: capture() on the thread that hands the work over, a ThreadLocalStateGuard
// on the thread that does it.
//
//   ThreadLocalState state = ThreadLocalState::capture();
//   std::thread t([state] { ThreadLocalStateGuard g(state); ... });
#pragma once

#include <tandem/autograd/autocast.h>
#include <tandem/autograd/saved_tensor.h>
#include <memory>
#include <utility>
#include <vector>

namespace tandem {

class WeightGradDeferral;
class WeightPacking;

struct ThreadLocalState {
  bool grad_mode = true;
  bool non_blocking_copies = false;
  std::shared_ptr<const SavedTensorHooksPair> saved_tensor_hooks;
  std::vector<std::pair<int, void*>> cuda_streams;  // (device, cudaStream_t) this thread set
  int intra_op_threads_cap = 0;                     // IntraOpThreadsGuard's; 0: none
  AutocastState autocast;                           // with the region's cast cache
  std::shared_ptr<WeightGradDeferral> weight_grad_deferral;  // where Linear's dW goes, if set
  std::shared_ptr<WeightPacking> weight_packing;             // kept copies of weights, if set

  /// The calling thread's state.
  static ThreadLocalState capture();
};

/// Makes `state` the calling thread's for the scope and restores the previous one after it.
class ThreadLocalStateGuard {
 public:
  explicit ThreadLocalStateGuard(const ThreadLocalState& state);
  ~ThreadLocalStateGuard();
  ThreadLocalStateGuard(const ThreadLocalStateGuard&) = delete;
  ThreadLocalStateGuard& operator=(const ThreadLocalStateGuard&) = delete;

 private:
  ThreadLocalState previous_;
  std::vector<int> reset_to_default_;  // devices whose stream only `state` set
};

}  // namespace tandem
