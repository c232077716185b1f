// parallel/comm/mpi_communicator.h — collectives over MPI (Open MPI from Debian), the seeds'
// third backend. Ranks come from the MPI launcher (mpirun, srun with PMI), not from a store:
//   mpirun -np 2 ./train        // parallel::init_process_group({.backend = "mpi"})
// Each communicator's MPI calls are made by one thread at a time: its queue
// (collective_queue.h), which runs a call in the caller's thread when it is idle and on its
// worker otherwise. MPI is initialised asking for MPI_THREAD_MULTIPLE and needs at least
// MPI_THREAD_SERIALIZED; sub-groups (new_group: MPI_Comm_split) need MULTIPLE, since two
// groups' queues may call MPI at once. Every collective in every dtype: bfloat16 and
// float16 travel as 2-byte elements and are reduced by user operations that add in float; mean is
// a sum, then a division. CPU tensors only (CUDA ones are staged through the host).
// Messages: a send is buffered (it completes at once); the queue's worker keeps MPI progressing
// while sends are in flight, so a receiver is never left waiting for an idle sender.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <chrono>
#include <memory>

namespace tandem::parallel {

/// Whether this build has MPI (found by CMake: libopenmpi-dev).
bool mpi_available();

/// Rank `rank` of an MPI world: MPI_COMM_WORLD, duplicated so that this group's messages never
/// meet another's. Initialises MPI on first use (MPI_Finalize runs at exit). DistributedError if
/// MPI's world does not have `world_size` ranks or this process is not rank `rank` (-1: any).
std::shared_ptr<Communicator> make_mpi_communicator(int rank, int world_size,
                                                    std::chrono::milliseconds timeout);

}  // namespace tandem::parallel
