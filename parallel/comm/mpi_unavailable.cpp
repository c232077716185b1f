// parallel/comm/mpi_unavailable.cpp — the MPI factory of a build without MPI: a clear error.
#include <tandem/core/check.h>
#include <tandem/parallel/comm/mpi_communicator.h>

namespace tandem::parallel {

bool mpi_available() { return false; }

std::shared_ptr<Communicator> make_mpi_communicator(int rank, int, std::chrono::milliseconds) {
  ::tandem::detail::fail<ValueError>(
      "init_process_group: rank ", rank,
      " asked for the mpi backend, but this build of Tandem has no MPI (configured without "
      "libopenmpi-dev)\n  hint: apt-get install libopenmpi-dev and reconfigure, or use backend "
      "\"shm\" or \"gloo\"");
}

}  // namespace tandem::parallel
