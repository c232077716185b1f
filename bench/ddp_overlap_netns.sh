#!/usr/bin/env bash
# bench/ddp_overlap_netns.sh — DDP's overlap measured between two "nodes" joined by a network
# link of a given rate: two network namespaces, a veth pair shaped with tbf (default 1gbit, a
# common Ethernet), one `tandem launch` per namespace. On loopback, communication is CPU work
# that competes with the two ranks' compute for this machine's 2 cores; over a rate-limited link
# it is mostly waiting, as between real machines, which is the case overlap exists for.
# Needs root (ip netns, tc). Usage: [TANDEM=path/to/tandem] bench/ddp_overlap_netns.sh [BUILD_DIR] [RATE]
set -euo pipefail
build=${1:-build-bench}
rate=${2:-1gbit}
source "$(dirname "$0")/netns_link.sh"
tandem=${TANDEM:-$build/tools/tandem}  # the launcher (a build with tools)
launch="$tandem launch --nnodes 2 --nproc-per-node 1 --master-addr 10.231.9.1 --master-port 29561"
echo "2 ranks in two network namespaces, link $rate each way (tbf), 64 MiB MLP, batch ${DDP_BENCH_BATCH:-32} per rank"
ip netns exec ${ns}b $launch --node-rank 1 -- "$build/bench/ddp_bench" --worker >/dev/null &
ip netns exec ${ns}a $launch --node-rank 0 -- "$build/bench/ddp_bench" --worker |
  awk '$2 == "overlap" {
    printf "  bucketed DDP (overlapped):      %8.1f ms\n", $4 * 1e3
    printf "  one all-reduce after backward:  %8.1f ms\n", $5 * 1e3
    printf "  overlap saves %.1f %% of the step (bucketed / single = %.3f)\n", 100 * (1 - $4 / $5), $4 / $5 }'
wait
