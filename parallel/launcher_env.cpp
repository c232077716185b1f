// parallel/launcher_env.cpp — the variables of each launcher, in order of precedence.
#include <tandem/core/env.h>
#include <tandem/parallel/launcher_env.h>

namespace tandem::parallel {
namespace {

using ::tandem::detail::env_int;
using ::tandem::detail::env_str;

// The first of `names` that is set, as an integer; `fallback` when none is.
int first_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names)
    if (!env_str(n).empty()) return int(env_int(n, fallback));
  return fallback;
}

}  // namespace

int env_rank() {
  return first_int({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, -1);
}

int env_world_size() {
  return first_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, -1);
}

int env_local_rank() {
  return first_int({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"},
                   0);
}

int env_local_world_size() {
  const int n =
      first_int({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, -1);
  if (n > 0) return n;
  // SLURM_NTASKS_PER_NODE is "2" or, for uneven layouts, "2(x3),1": the first count is ours
  // only when the layout is even, so take it only then.
  const std::string per_node = env_str("SLURM_NTASKS_PER_NODE");
  if (!per_node.empty() && per_node.find_first_not_of("0123456789") == std::string::npos)
    return std::stoi(per_node);
  return -1;
}

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
