// core/world.h — who this process is among the processes of its job: its rank, the world size,
// its rank on this node and the node's rank count. One source of truth, read by every consumer
// (DistributedSampler's defaults, parallel::local_device(), the process group, logs), so that no
// consumer can see another world than the others:
//   1. the process group, once this process has joined one (its communicator's rank and size);
//   2. else the variables of the launcher that started it;
//   3. else rank 0 of a world of 1.
// The launchers, in order of precedence:
//   torchrun, `tandem launch`, spawn: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   Open MPI's mpirun:  OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   PMI (MPICH, Intel MPI): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   Slurm's srun:       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
// All four numbers come from one launcher, the first that sets its rank or world-size variable,
// never a mix: mpirun inside a Slurm allocation also leaves the batch step's SLURM_PROCID=0 and
// SLURM_NTASKS in every rank's environment, and a mix would give every rank the same rank.
#pragma once

#include <optional>
#include <string>

namespace tandem {

struct WorldIdentity {
  int rank = 0;               // -1: the launcher sets a world size but no rank
  int world_size = 1;         // -1: the launcher sets a rank but no world size
  int local_rank = 0;         // 0 when the launcher does not say
  int local_world_size = -1;  // -1 when the launcher does not say
  /// Where the numbers come from, for messages: "torchrun (RANK, WORLD_SIZE)", "Open MPI
  /// (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE)", "PMI (PMI_RANK, PMI_SIZE)", "Slurm
  /// (SLURM_PROCID, SLURM_NTASKS)", "the process group" or "no launcher".
  std::string source = "no launcher";
  /// The variables that would name the rank and the world size ("RANK", "WORLD_SIZE"), for
  /// messages about a missing one; empty for the process group and for no launcher.
  std::string rank_variable, world_variable;
};

/// The launcher's variables: the first launcher in the order above that sets its rank or world
/// size variable; nullopt when none does. ValueError naming the variable when one of them is not
/// an integer.
std::optional<WorldIdentity> launcher_world();

/// The world as it is now: the process group's when this process has joined one (its local rank
/// and local world size still the launcher's), else launcher_world(), else rank 0 of 1.
WorldIdentity current_world();

namespace detail {
/// init_process_group calls it once its communicator is up: from then on current_world() is the
/// group's (`rank` of `world_size`).
void set_joined_world(int rank, int world_size);
/// destroy_process_group calls it: current_world() is the launcher's again.
void clear_joined_world();
}  // namespace detail

}  // namespace tandem
