// parallel/comm/nccl_communicator.h — collectives between GPUs over NCCL. Built when the CUDA
// backend and NCCL are (nccl_communicator.cpp); otherwise the factory throws a DeviceError that
// says so (nccl_unavailable.cpp).
#pragma once

#include <tandem/core/device.h>
#include <tandem/parallel/comm/communicator.h>
#include <tandem/parallel/store/store.h>
#include <memory>

namespace tandem::parallel {

/// A communicator for CUDA tensors on `device`: rank 0 makes the NCCL unique id and publishes it
/// through `store`; every collective runs on the communicator's own stream, ordered after the
/// caller's work with events; a collective that overruns `timeout` aborts the communicator
/// (ncclCommAbort) and fails with a DistributedError instead of hanging.
std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Store> store, int rank,
                                                     int size, Device device,
                                                     std::chrono::milliseconds timeout);
/// Whether this build has NCCL.
bool nccl_available();

}  // namespace tandem::parallel
