// parallel/data_parallel/replicate.h — DataParallel's first step: a replica of the module on each
// device. A replica is a shallow copy of the module whose parameters are *differentiable copies*
// of the originals, not new leaves: backward through a replica therefore adds its gradient into
// the original parameter, and the engine sums the replicas' parts in a fixed order (PyTorch's
// Broadcast and ReduceAddCoalesced in one). Replicas made under NoGradGuard carry no graph.
//
// Buffers (batch norm's running statistics) follow PyTorch: replica 0 (on the module's device)
// uses the module's own buffers, so its updates are kept; the other replicas get copies, and
// their updates are dropped when the replica goes away.
#pragma once

#include <tandem/nn/any_module.h>
#include <vector>

namespace tandem::parallel {

/// `params` copied to every device in `devices`: result[k][i] is params[i] on devices[k]. On the
/// parameters' own device the result is the parameters themselves. The copy is coalesced: one
/// flat buffer per dtype is built on the source device and copied once to each other device, and
/// the per-parameter tensors are views of it. In backward each view's gradient is copied back to
/// the source on its own.
std::vector<std::vector<Tensor>> broadcast_coalesced(const std::vector<Tensor>& params,
                                                     const std::vector<Device>& devices);

namespace detail {
/// Installs replica `k`'s tensors into `replica` (a copy of the module): each parameter
/// originals[i] becomes copies[i] (under every name it has), buffers are shared for k = 0 and
/// copied to `device` otherwise.
void install_replica(nn::Module& replica, const std::vector<Tensor>& originals,
                     const std::vector<Tensor>& copies, size_t k, Device device);
}  // namespace detail

/// A replica of `module` on each of `devices` (devices[0] must hold the module's parameters).
/// Each is a copy of the module (AnyModule's copy: the same structure, new module objects) with
/// its tensors replaced as above.
std::vector<nn::AnyModule> replicate(const nn::AnyModule& module,
                                     const std::vector<Device>& devices);

}  // namespace tandem::parallel
