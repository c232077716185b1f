// parallel/comm/nccl_unavailable.cpp — the NCCL factory of a build without CUDA or NCCL: a clear
// error, pointing at Gloo, which handles CUDA tensors too (through host copies).
#include <tandem/core/check.h>
#include <tandem/parallel/comm/nccl_communicator.h>

namespace tandem::parallel {

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Store>, int rank, int, Device,
                                                     std::chrono::milliseconds) {
  ::tandem::detail::fail<DeviceError>(
      "init_process_group: rank ", rank,
      " asked for the nccl backend, but this build of Tandem has no NCCL "
      "(configured without CUDA or without libnccl)\n  hint: use "
      "backend \"gloo\", which also reduces CUDA tensors (through the host)");
}

bool nccl_available() { return false; }

}  // namespace tandem::parallel
