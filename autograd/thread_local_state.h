// autograd/thread_local_state.h — the per-thread settings that must follow work into the threads
// Tandem starts (backward workers, DataLoader workers, DataParallel's replica threads, pipeline
// stages): grad mode, the non-blocking-copies flag, the current CUDA streams, the saved-tensor
// hooks, the cap on intra-op threads and autocast. As PyTorch's at::ThreadLocalState: capture() on
// the thread that hands the work over, a ThreadLocalStateGuard on the thread that does it.
//
// It holds the language's state only, what a user sets around their code; never a policy of one
// parallel mode (a mode passes its choices as arguments: autograd::BackwardOptions).
// scripts/check_source.sh lists the fields, so a new one is a reviewed decision.
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

struct ThreadLocalState {
  bool grad_mode = true;
  bool non_blocking_copies = false;
  std::shared_ptr<const SavedTensorHooksPair> saved_tensor_hooks;
  std::vector<std::pair<int, void*>> cuda_streams;  // (device, cudaStream_t) this thread set
  int intra_op_threads_cap = 0;                     // IntraOpThreadsGuard's; 0: none
  AutocastState autocast;                           // with the region's cast cache

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
