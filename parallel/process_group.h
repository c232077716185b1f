// parallel/process_group.h — joining the group of ranks (torch.distributed.init_process_group).
//   parallel::init_process_group();            // env:// — RANK, WORLD_SIZE, MASTER_ADDR/PORT
//   parallel::init_process_group({.init_method = "tcp://10.0.0.1:29500", .rank = 1,
//                                 .world_size = 2});
//   parallel::default_group().all_reduce(t)->wait();
// The rendezvous store is a TCPStore served by rank 0 (env://, tcp://) or a FileStore
// (file:///dir). The backend follows the device: NCCL for cuda:N; for the CPU, shared memory
// when every rank is on this host (locality.h), else Gloo. Backend "mpi" needs no store: MPI's
// launcher has placed the ranks, and it is the default under mpirun when MASTER_ADDR is unset.
// Rank, world size and local rank come from tandem launch, mpirun, PMI or Slurm (core/world.h);
// once joined, the group's rank and world are current_world(), which every consumer reads.
#pragma once

#include <tandem/core/device.h>
#include <tandem/parallel/comm/communicator.h>
#include <tandem/parallel/heartbeat.h>
#include <tandem/parallel/store/store.h>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace tandem::parallel {

struct ProcessGroupOptions {
  std::string backend;                 // "shm", "gloo", "nccl", "mpi", or empty: from `device`
  std::string init_method = "env://";  // env:// | tcp://host:port | file:///path/to/dir
  int rank = -1;                       // -1: from the environment (RANK, OMPI_…, SLURM_PROCID)
  int world_size = -1;                 // -1: from the environment (WORLD_SIZE, …)
  std::optional<Device> device;        // unset: local_device() (cuda:LOCAL_RANK or cpu:LOCAL_RANK)
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};  // rendezvous and collectives
  /// Each rank beats through the store and watches a neighbour (heartbeat.h): a rank that dies
  /// or freezes ends the others within the deadline (2 s), not at `timeout`. std::nullopt, or
  /// TANDEM_HEARTBEAT=0 in the environment (a debugger paused on one rank looks frozen), turns
  /// it off. Not for "mpi": mpirun ends the job when a rank dies.
  std::optional<HeartbeatOptions> heartbeat = HeartbeatOptions{};
};

/// Joins the group: rendezvous through the store, then connects the backend. Every rank calls
/// it with the same init_method and world size. DistributedError when a rank does not arrive
/// within the timeout, and at once when ranks were told different world sizes or backends
/// (comm/world_agreement.h) or, for "mpi", when the environment names a world MPI_COMM_WORLD
/// is not; ValueError for bad or missing settings (naming the variable).
std::shared_ptr<Communicator> init_process_group(ProcessGroupOptions options = {});
bool is_initialized();
/// The group init_process_group made; DistributedError naming the fix when there is none.
Communicator& default_group();
/// The store the default group met at (for user rendezvous: barriers on keys, shared values).
std::shared_ptr<Store> default_store();
int get_rank();        // 0 when no group is initialised
int get_world_size();  // 1 when no group is initialised
/// Leaves the group (rank 0 keeps the store up until the others have left, or 10 s).
void destroy_process_group();
/// Tells the group that this process ends normally (its heartbeat's goodbye) and stops beating,
/// leaving the group itself as it is: for a process about to std::_Exit, which runs no
/// destructors (spawn's workers call it when their function returns).
void end_heartbeat();

/// The device this process should use: cuda:LOCAL_RANK when this node has a CUDA device for each
/// of its LOCAL_WORLD_SIZE ranks (the world size when that is unset), else cpu:LOCAL_RANK
/// (LOCAL_RANK 0 and one rank when neither is set). The numbers are current_world()'s.
Device local_device();

namespace detail {
/// "host:port" or "[v6-address]:port" -> (host, port); ValueError naming `what` when malformed.
std::pair<std::string, int> parse_host_port(const std::string& s, const std::string& what);
/// Creates the store named by an init method (env://, tcp://, file://) for `rank`.
std::shared_ptr<Store> make_store(const std::string& init_method, int rank,
                                  std::chrono::milliseconds timeout);
}  // namespace detail

}  // namespace tandem::parallel
