// parallel/comm/cpu_relax.h — the pause a spinning waiter makes between looks at a shared word.
// On x86 it tells the core that this is a spin-wait: the loop stops flooding the memory pipeline
// and leaves more of the core to its hyper-thread sibling. The waiters that spin: shm_segment.cpp
// (a peer's step) and thread_world.cpp (a meeting of thread ranks).
#pragma once

namespace tandem::parallel::detail {

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace tandem::parallel::detail
