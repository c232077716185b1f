// core/world.cpp — the launchers' variables, one launcher at a time, and the process group's slot.
#include <tandem/core/env.h>
#include <tandem/core/world.h>
#include <mutex>

namespace tandem {
namespace {

using detail::env_int;
using detail::env_str;

struct Launcher {
  const char* source;
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;  // nullptr: Slurm's is a layout, read by slurm_tasks_per_node()
};

// In order of precedence: torchrun's first, since `tandem launch` may itself run under mpirun or
// srun (one launcher per node, which then starts the ranks with these variables).
constexpr Launcher kLaunchers[] = {
    {"torchrun (RANK, WORLD_SIZE)", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE)", "OMPI_COMM_WORLD_RANK",
     "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"PMI (PMI_RANK, PMI_SIZE)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"Slurm (SLURM_PROCID, SLURM_NTASKS)", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
     nullptr},
};

bool is_set(const char* name) { return !env_str(name).empty(); }

// SLURM_NTASKS_PER_NODE is "2" or, for uneven layouts, "2(x3),1": the first count is this node's
// only when the layout is even, so it is taken only then.
int slurm_tasks_per_node() {
  const std::string per_node = env_str("SLURM_NTASKS_PER_NODE");
  if (!per_node.empty() && per_node.find_first_not_of("0123456789") == std::string::npos)
    return int(env_int("SLURM_NTASKS_PER_NODE", -1));
  return -1;
}

std::mutex g_world_mu;
std::optional<WorldIdentity> g_joined_world;  // set while this process is in a process group

}  // namespace

std::optional<WorldIdentity> launcher_world() {
  for (const Launcher& l : kLaunchers) {
    if (!is_set(l.rank) && !is_set(l.world)) continue;
    return WorldIdentity{.rank = int(env_int(l.rank, -1)),
                         .world_size = int(env_int(l.world, -1)),
                         .local_rank = int(env_int(l.local_rank, 0)),
                         .local_world_size = l.local_world ? int(env_int(l.local_world, -1))
                                                           : slurm_tasks_per_node(),
                         .source = l.source,
                         .rank_variable = l.rank,
                         .world_variable = l.world};
  }
  return std::nullopt;
}

WorldIdentity current_world() {
  {
    std::lock_guard lk(g_world_mu);
    if (g_joined_world) return *g_joined_world;
  }
  return launcher_world().value_or(WorldIdentity{});
}

namespace detail {

void set_joined_world(int rank, int world_size) {
  // The node's layout is the launcher's to say: a communicator knows only the world.
  const WorldIdentity launcher = launcher_world().value_or(WorldIdentity{});
  std::lock_guard lk(g_world_mu);
  g_joined_world = WorldIdentity{.rank = rank,
                                 .world_size = world_size,
                                 .local_rank = launcher.local_rank,
                                 .local_world_size = launcher.local_world_size,
                                 .source = "the process group",
                                 .rank_variable = "",
                                 .world_variable = ""};
}

void clear_joined_world() {
  std::lock_guard lk(g_world_mu);
  g_joined_world.reset();
}

}  // namespace detail

}  // namespace tandem
