// parallel/launcher_env.h — where a rank learns who it is, from whichever launcher started it:
// torchrun-style variables first (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT: `tandem launch` and spawn set them), then mpirun's (OMPI_COMM_WORLD_RANK, _SIZE,
// _LOCAL_RANK, _LOCAL_SIZE), then Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
// SLURM_NTASKS_PER_NODE, the master being the first host of SLURM_JOB_NODELIST), so that
// `mpirun -np 2 prog` and `srun prog` work with env:// as they are.
#pragma once

#include <string>

namespace tandem::parallel {

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
