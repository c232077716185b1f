// parallel/comm/host_staging.h — the transports that work on host memory (Gloo, shared memory)
// reach a tensor's values through a host copy when it lives on a GPU.
#pragma once

#include <tandem/core/layout.h>
#include <tandem/core/tensor.h>

namespace tandem::parallel::detail {

/// A host tensor holding `t`'s values (t itself when it is on the CPU).
inline Tensor staged(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

/// Afterwards the result in `host` is t's. A CPU tensor the transport wrote directly gets a new
/// version, as any in-place write does: what remembers t's contents by version (the CPU GEMM's
/// packed weights) then knows they changed, which is how DDP's parameter broadcast is seen.
inline void unstage(Tensor& t, const Tensor& host) {
  if (t.device().is_cpu()) {
    ::tandem::detail::bump_version(t);
  } else {
    t.copy_(host);
  }
}

}  // namespace tandem::parallel::detail
