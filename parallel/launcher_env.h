// parallel/launcher_env.h — where a rank learns who it is, from whichever launcher started it
// (`tandem launch` and spawn set torchrun's variables; mpirun, PMI and Slurm their own), so that
// `mpirun -np 2 prog` and `srun prog` work with env:// as they are. Rank and sizes are
// core/world.h's launcher_world() (one launcher's variables, never a mix); this adds where the
// rendezvous is: MASTER_ADDR and MASTER_PORT, else under Slurm the first host of
// SLURM_JOB_NODELIST and a port from the job id.
#pragma once

#include <string>

namespace tandem::parallel {

// launcher_world()'s numbers: what the launcher said, also after this process joined a group
// (current_world() is then the group's).
int env_rank();              // -1 when no launcher says
int env_world_size();        // -1 when no launcher says
int env_local_rank();        // 0 when no launcher says
int env_local_world_size();  // -1 when no launcher says
/// MASTER_ADDR, else under Slurm the first host of the job's node list; empty otherwise.
std::string env_master_addr();
/// MASTER_PORT, else under Slurm 20000 + SLURM_JOB_ID mod 10000 (the same on every node of the
/// job, and different for jobs sharing a node); -1 otherwise.
int env_master_port();
/// Whether an MPI launcher started this process (OMPI_COMM_WORLD_SIZE or PMI_SIZE is set).
bool launched_by_mpi();

/// The first host of a Slurm node list: "node[07-09,12],gpu1" -> "node07".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace tandem::parallel
