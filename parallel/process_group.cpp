// parallel/process_group.cpp — parses the init method, builds the store and the communicator, and
// keeps them as the process's default group. A new group gets a fresh namespace in the store
// ("pg0", "pg1", …), so a second init after destroy never reads the first one's keys.
#include <tandem/core/check.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/env.h>
#include <tandem/core/world.h>
#include <tandem/parallel/comm/gloo_communicator.h>
#include <tandem/parallel/comm/locality.h>
#include <tandem/parallel/comm/mpi_communicator.h>
#include <tandem/parallel/comm/nccl_communicator.h>
#include <tandem/parallel/comm/shm_communicator.h>
#include <tandem/parallel/comm/world_agreement.h>
#include <tandem/parallel/launcher_env.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/store/file_store.h>
#include <tandem/parallel/store/prefix_store.h>
#include <tandem/parallel/store/tcp_store.h>
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <mutex>

namespace tandem::parallel {

using ::tandem::detail::env_int;
using ::tandem::detail::env_str;
namespace {

struct Group {
  std::shared_ptr<Store> store;  // the rendezvous store itself (TCPStore or FileStore)
  std::shared_ptr<Communicator> comm;
  std::shared_ptr<Heartbeat> heartbeat;
};

// The heartbeat's store: a connection of its own to a TCPStore (a beat must not wait behind a
// long request of the program's), whose requests give up at the deadline; a FileStore as it is.
std::shared_ptr<Store> heartbeat_store(const std::shared_ptr<Store>& store, const std::string& ns,
                                       std::chrono::milliseconds deadline) {
  std::shared_ptr<Store> own = store;
  if (auto tcp = std::dynamic_pointer_cast<TCPStore>(store))
    own = std::make_shared<TCPStore>(
        TCPStoreOptions{.host = tcp->host(), .port = tcp->port(), .timeout = deadline});
  return std::make_shared<PrefixStore>(ns + "/heartbeat", own);
}

bool heartbeat_wanted(const ProcessGroupOptions& o) {
  return o.heartbeat.has_value() && env_int("TANDEM_HEARTBEAT", 1) != 0;
}

// MPI's world is the truth under mpirun; the environment names another world when MPI was not
// started by its launcher (`tandem launch` with backend "mpi": each process a world of one, whose
// all_reduce returns its input) or when a variable is left over from another launcher.
void check_mpi_world(const Communicator& comm, const std::optional<WorldIdentity>& env) {
  if (!env || env->world_size < 0 || env->world_size == comm.size()) return;
  ::tandem::detail::fail<DistributedError>(
      "init_process_group: the environment says a world of ", env->world_size, " (", env->source,
      "), but MPI_COMM_WORLD has ", comm.size(), comm.size() == 1 ? " rank" : " ranks",
      comm.size() == 1 ? ": MPI was not started by its launcher, so every process would be a "
                         "world of its own"
                       : "",
      "\n  hint: start the program with `mpirun -np ", env->world_size,
      " <program>`, or under `tandem launch` use backend \"shm\" or \"gloo\"");
}

std::mutex g_mu;
Group g_group;
int g_generation = 0;

}  // namespace

namespace detail {

std::pair<std::string, int> parse_host_port(const std::string& s, const std::string& what) {
  const size_t colon = s.rfind(':');
  int port = -1;
  if (colon != std::string::npos) {
    const auto [end, ec] = std::from_chars(s.data() + colon + 1, s.data() + s.size(), port);
    if (ec != std::errc() || end != s.data() + s.size()) port = -1;  // "29500x" is no port
  }
  TD_CHECK_VALUE(colon != std::string::npos && colon > 0 && port > 0 && port < 65536, what, " '", s,
                 "' is not host:port");
  std::string host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);  // [::1]:29500
  return {host, port};
}

std::shared_ptr<Store> make_store(const std::string& init_method, int rank,
                                  std::chrono::milliseconds timeout) {
  std::shared_ptr<Store> store;
  if (init_method == "env://" || init_method.rfind("tcp://", 0) == 0) {
    std::string host;
    int port = 0;
    if (init_method == "env://") {
      host = env_master_addr();
      TD_CHECK_VALUE(!host.empty(),
                     "init_process_group(env://): MASTER_ADDR is not set\n  hint: "
                     "start the program with `tandem launch`, or set MASTER_ADDR and MASTER_PORT "
                     "(under mpirun, backend \"mpi\" needs neither)");
      port = env_master_port();
      TD_CHECK_VALUE(
          port > 0 && port < 65536, "init_process_group(env://): MASTER_PORT is ",
          env_str("MASTER_PORT").empty() ? "not set" : "'" + env_str("MASTER_PORT") + "'",
          "\n  hint: start the program with `tandem launch`, or set MASTER_PORT");
    } else {
      std::tie(host, port) = parse_host_port(init_method.substr(6), "init_method tcp://");
    }
    store = std::make_shared<TCPStore>(TCPStoreOptions{
        .host = host, .port = port, .is_server = rank == 0, .rank = rank, .timeout = timeout});
  } else if (init_method.rfind("file://", 0) == 0) {
    const std::string path = init_method.substr(7);
    TD_CHECK_VALUE(!path.empty(), "init_method 'file://' names no path (expected file:///dir)");
    store = std::make_shared<FileStore>(path);
    store->set_timeout(timeout);
  } else {
    ::tandem::detail::fail<ValueError>("init_process_group: unknown init_method '", init_method,
                                       "' (expected env://, tcp://host:port or file:///path)");
  }
  return store;
}

}  // namespace detail

Device local_device() {
  const WorldIdentity world = current_world();
  // A GPU for every rank on this node, or none for any: every rank must pick the same kind of
  // device, since the device picks the backend (two ranks on one GPU would otherwise be one NCCL
  // rank waiting for a Gloo one).
  // (Without LOCAL_WORLD_SIZE, as in a launch by hand, the node is taken to hold the whole world.)
  const int local_ranks =
      std::max({world.local_rank + 1, world.local_world_size, world.world_size});
  if (cuda::is_available() && cuda::device_count() >= local_ranks)
    return Device::cuda(world.local_rank);
  return Device::cpu(world.local_rank);
}

std::shared_ptr<Communicator> init_process_group(ProcessGroupOptions o) {
  std::lock_guard lk(g_mu);
  TD_CHECK_VALUE(
      g_group.comm == nullptr, "init_process_group: this process already joined a group (rank ",
      g_group.comm ? g_group.comm->rank() : -1, ")\n  hint: call destroy_process_group() first");
  const Device device = o.device.value_or(local_device());
  const std::optional<WorldIdentity> env = launcher_world();
  std::string backend = o.backend;
  // Started by mpirun without a rendezvous address: MPI itself is the only way to meet.
  if (backend.empty() && !device.is_cuda() && launched_by_mpi() && env_master_addr().empty())
    backend = "mpi";
  if (backend == "mpi") {
    Group group;
    group.comm = make_mpi_communicator(o.rank, o.world_size, o.timeout);
    if (o.world_size < 0) check_mpi_world(*group.comm, env);  // a given one was checked
    g_group = group;
    ::tandem::detail::set_joined_world(group.comm->rank(), group.comm->size());
    return group.comm;
  }
  const std::string told_by = o.world_size >= 0 ? "init_process_group's .world_size"
                              : env             ? env->source
                                                : "no launcher";
  if (o.rank < 0 && env) o.rank = env->rank;
  if (o.world_size < 0 && env) o.world_size = env->world_size;
  TD_CHECK_VALUE(o.rank >= 0, "init_process_group: no rank (",
                 env ? env->source + " sets no " + env->rank_variable : "RANK is not set",
                 ")\n  hint: start the program with `tandem launch`, or pass .rank");
  TD_CHECK_VALUE(o.world_size >= 1, "init_process_group: no world size (",
                 env ? env->source + " sets no " + env->world_variable : "WORLD_SIZE is not set",
                 ")\n  hint: start the program with `tandem launch`, or pass .world_size");
  TD_CHECK_VALUE(o.rank < o.world_size, "init_process_group: rank ", o.rank,
                 " is not in a world of size ", o.world_size);
  if (backend.empty()) backend = device.is_cuda() ? "nccl" : "cpu";
  TD_CHECK_VALUE(backend == "gloo" || backend == "nccl" || backend == "shm" || backend == "cpu",
                 "init_process_group: unknown backend '", backend,
                 "' (expected shm, gloo, nccl or mpi)");

  Group group;
  group.store = detail::make_store(o.init_method, o.rank, o.timeout);
  const std::string generation = "pg" + std::to_string(g_generation++);
  auto ns = std::make_shared<PrefixStore>(generation, group.store);
  // Before anything waits for a whole world: ranks told different worlds fail here at once.
  check_world_agreement(
      *ns, {.rank = o.rank, .world_size = o.world_size, .backend = backend, .told_by = told_by},
      o.timeout);
  if (backend == "cpu" || backend == "shm") {
    // CPU ranks that share a host meet in shared memory; any rank elsewhere means TCP (Gloo).
    const bool local = all_ranks_on_one_host(*ns, o.rank, o.world_size);
    TD_CHECK_VALUE(local || backend == "cpu",
                   "init_process_group: backend \"shm\" needs every "
                   "rank on this host, but rank ",
                   o.rank, " (", host_identity(),
                   ") shares it with only some\n  hint: use backend \"gloo\" across hosts");
    backend = local ? "shm" : "gloo";
  }
  if (backend == "shm") {
    group.comm = std::make_shared<ShmCommunicator>(ns, o.rank, o.world_size,
                                                   ShmOptions{.timeout = o.timeout});
  } else if (backend == "gloo") {
    GlooOptions go{.timeout = o.timeout};
    if (o.init_method == "env://") go.peer_hint = env_master_addr();
    if (o.init_method.rfind("tcp://", 0) == 0)
      go.peer_hint = detail::parse_host_port(o.init_method.substr(6), "").first;
    if (auto tcp = std::dynamic_pointer_cast<TCPStore>(group.store))
      go.departed_ranks = [tcp] { return tcp->departed_ranks(); };
    group.comm = std::make_shared<GlooCommunicator>(ns, o.rank, o.world_size, go);
  } else {
    group.comm = make_nccl_communicator(ns, o.rank, o.world_size, device, o.timeout);
  }
  if (heartbeat_wanted(o))  // after the rendezvous: every rank is alive to start beating
    group.heartbeat =
        std::make_shared<Heartbeat>(heartbeat_store(group.store, generation, o.heartbeat->deadline),
                                    o.rank, o.world_size, *o.heartbeat);
  g_group = group;
  ::tandem::detail::set_joined_world(o.rank, o.world_size);
  return group.comm;
}

bool is_initialized() {
  std::lock_guard lk(g_mu);
  return g_group.comm != nullptr;
}

Communicator& default_group() {
  std::lock_guard lk(g_mu);
  TD_CHECK_AS(DistributedError, g_group.comm != nullptr,
              "no process group: call parallel::init_process_group() first");
  return *g_group.comm;
}

std::shared_ptr<Store> default_store() {
  std::lock_guard lk(g_mu);
  TD_CHECK_AS(DistributedError, g_group.store != nullptr,
              "no process group: call parallel::init_process_group() first");
  return g_group.store;
}

int get_rank() {
  std::lock_guard lk(g_mu);
  return g_group.comm ? g_group.comm->rank() : 0;
}

int get_world_size() {
  std::lock_guard lk(g_mu);
  return g_group.comm ? g_group.comm->size() : 1;
}

void end_heartbeat() {
  std::shared_ptr<Heartbeat> heartbeat;
  {
    std::lock_guard lk(g_mu);
    heartbeat = std::move(g_group.heartbeat);
  }
  heartbeat.reset();
}

void destroy_process_group() {
  Group old;
  {
    std::lock_guard lk(g_mu);
    old = std::move(g_group);
    g_group = {};
    ::tandem::detail::clear_joined_world();
  }
  old.heartbeat.reset();  // says this rank leaves: its silence from now on is no death
  old.comm.reset();       // finishes queued collectives
  old.store.reset();      // rank 0: the server lingers until the others have said goodbye
}

}  // namespace tandem::parallel
