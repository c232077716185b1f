// parallel/launcher_env.cpp — the rendezvous address of each launcher; ranks from core/world.h.
#include <tandem/core/env.h>
#include <tandem/core/world.h>
#include <tandem/parallel/launcher_env.h>

namespace tandem::parallel {

using ::tandem::detail::env_int;
using ::tandem::detail::env_str;

int env_rank() { return launcher_world().value_or(WorldIdentity{.rank = -1}).rank; }

int env_world_size() {
  return launcher_world().value_or(WorldIdentity{.world_size = -1}).world_size;
}

int env_local_rank() { return launcher_world().value_or(WorldIdentity{}).local_rank; }

int env_local_world_size() { return launcher_world().value_or(WorldIdentity{}).local_world_size; }

std::string env_master_addr() {
  std::string addr = env_str("MASTER_ADDR");
  if (!addr.empty()) return addr;
  for (const char* n : {"SLURM_JOB_NODELIST", "SLURM_NODELIST"})
    if (!env_str(n).empty()) return first_slurm_host(env_str(n));
  return "";
}

int env_master_port() {
  if (!env_str("MASTER_PORT").empty()) return int(env_int("MASTER_PORT", -1));
  if (!env_str("SLURM_JOB_ID").empty()) return 20000 + int(env_int("SLURM_JOB_ID", 0) % 10000);
  return -1;
}

bool launched_by_mpi() {
  return !env_str("OMPI_COMM_WORLD_SIZE").empty() || !env_str("PMI_SIZE").empty();
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  size_t end = 0;
  for (int depth = 0; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  // In "rack[01-02]-node[7,9]", each bracket stands for its first value: "rack01-node7" (zero
  // padding kept).
  std::string host;
  for (size_t i = 0; i < end; ++i) {
    if (nodelist[i] != '[') {
      host += nodelist[i];
      continue;
    }
    const size_t stop = nodelist.find_first_of("-,]", i + 1);
    host += nodelist.substr(i + 1, stop - i - 1);
    i = nodelist.find(']', i);
    if (i == std::string::npos) break;
  }
  return host;
}

}  // namespace tandem::parallel
