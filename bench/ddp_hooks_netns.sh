#!/usr/bin/env bash
# bench/ddp_hooks_netns.sh — what DDP's communication hooks cost and save between two "nodes"
# joined by a shaped link (bench/netns_link.sh; default 1gbit): the default recipe
# (`tandem train --ddp`, cnn-bn on MNIST unless DATASET/MODEL say otherwise) for EPOCHS epochs
# of at most STEPS steps (default 1 of 200)
# with each hook, one rank per namespace, Gloo over the link. Prints each run's epoch lines
# (images/s) and final held-out accuracy, side by side.
# Needs root. Usage: [TANDEM=path] [EPOCHS=1] bench/ddp_hooks_netns.sh [BUILD_DIR] [RATE]
set -euo pipefail
build=${1:-build-bench}
rate=${2:-1gbit}
source "$(dirname "$0")/netns_link.sh"
tandem=${TANDEM:-$build/tools/tandem}
dataset=${DATASET:-mnist}
[ "$dataset" = mnist ] && [ ! -d datasets/mnist ] && "$tandem" fetch mnist >/dev/null
echo "2 ranks in two network namespaces, link $rate each way (tbf), ${MODEL:-cnn-bn} on $dataset, ${EPOCHS:-1} epoch(s), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
port=29571
for hook in allreduce delay_allreduce bf16_compress powersgd:1:10 powersgd:4:10; do
  launch="$tandem launch --nnodes 2 --nproc-per-node 1 --master-addr 10.231.9.1 --master-port $port"
  args=(train --ddp --ddp-hook "$hook" --dataset "$dataset" --model "${MODEL:-cnn-bn}"
        --epochs "${EPOCHS:-1}" --max-steps "${STEPS:-200}" --no-progress --log-dir "/tmp/tandem-hooks-$$-$hook")
  ip netns exec ${ns}b $launch --node-rank 1 -- "$tandem" "${args[@]}" >/dev/null &
  echo "--- $hook"
  ip netns exec ${ns}a $launch --node-rank 0 -- "$tandem" "${args[@]}" | grep -E "^(\[rank0\]: )?(tandem train|epoch [0-9]+/|final)" || true
  wait
  port=$((port + 1))
done
