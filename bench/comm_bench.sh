#!/usr/bin/env bash
# bench/comm_bench.sh — all-reduce bandwidth of 2 ranks on this machine: Tandem's transports
# (bench/comm_bench: Gloo, shared memory, threads, memcpy) with Open MPI's MPI_Allreduce beside
# them (bench/shm_vs_mpi under mpirun: MPI and Tandem's shm in turn within every round, so the
# shm/mpi column is a ratio measured side by side), in one run.
#   bash bench/comm_bench.sh [rounds]      (after building build-bench with TANDEM_BUILD_BENCH=ON)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-7}"
bin="${TANDEM_BENCH_DIR:-build-bench/bench}"
mpi_times="$(mktemp)"
trap 'rm -f "$mpi_times"' EXIT
if [ -x "$bin/shm_vs_mpi" ] && command -v mpirun >/dev/null; then
  # Containers forbid the cross-memory-attach single copy (CMA): Open MPI's shared memory then
  # copies through its own segment, as Tandem's does.
  OMPI_MCA_btl_vader_single_copy_mechanism=none mpirun --allow-run-as-root --oversubscribe \
    -np 2 "$bin/shm_vs_mpi" "$rounds" > "$mpi_times"
  export TANDEM_MPI_RESULTS="$mpi_times"
else
  echo "(no mpirun or bench/shm_vs_mpi: the Open MPI column is left out)"
fi
"$bin/comm_bench" --rounds "$rounds"
