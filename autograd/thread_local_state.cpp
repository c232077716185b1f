// autograd/thread_local_state.cpp — capturing and applying the per-thread settings.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/thread_local_state.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/thread_pool.h>
#if TANDEM_HAS_CUDA
#include <tandem/core/cuda/stream.h>
#endif

namespace tandem {
namespace {

void apply(const ThreadLocalState& s) {
  GradMode::set_enabled(s.grad_mode);
  cuda::set_non_blocking_copies(s.non_blocking_copies);
  SavedTensorHooks::set_current(s.saved_tensor_hooks);
  detail::set_intra_op_threads_cap(s.intra_op_threads_cap);
  AutocastState::set_current(s.autocast);
#if TANDEM_HAS_CUDA
  for (const auto& [device, stream] : s.cuda_streams)
    cuda::set_current_stream(device, static_cast<cudaStream_t>(stream));
#endif
}

}  // namespace

ThreadLocalState ThreadLocalState::capture() {
  ThreadLocalState s;
  s.grad_mode = GradMode::is_enabled();
  s.non_blocking_copies = cuda::non_blocking_copies();
  s.saved_tensor_hooks = SavedTensorHooks::current();
  s.intra_op_threads_cap = detail::intra_op_threads_cap();
  s.autocast = AutocastState::current();
#if TANDEM_HAS_CUDA
  for (const auto& [device, stream] : cuda::current_streams())
    s.cuda_streams.emplace_back(device, static_cast<void*>(stream));
#endif
  return s;
}

ThreadLocalStateGuard::ThreadLocalStateGuard(const ThreadLocalState& state)
    : previous_(ThreadLocalState::capture()) {
  // Streams `state` sets on devices the previous state never touched go back to the default (the
  // legacy stream) afterwards rather than staying behind.
  for (const auto& [device, stream] : state.cuda_streams) {
    bool known = false;
    for (const auto& [d, s] : previous_.cuda_streams) known |= d == device;
    if (!known) reset_to_default_.push_back(device);
  }
  apply(state);
}

ThreadLocalStateGuard::~ThreadLocalStateGuard() {
#if TANDEM_HAS_CUDA
  for (int device : reset_to_default_) cuda::set_current_stream(device, cudaStreamLegacy);
#endif
  apply(previous_);
}

}  // namespace tandem
