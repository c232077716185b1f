#!/usr/bin/env bash
# bench/moe_quality.sh — does a mixture of experts learn more at equal compute? nanoGPT's CPU
# recipe on a corpus (default: tiny Shakespeare), 2,000 iterations: the dense GPT (MLPs 4C wide)
# against the same GPT whose every block is an MoE of 8 experts, top-2, each expert 2C wide (so a
# token's two experts cost what the dense MLP costs: the same active parameters, router aside).
# The same seed, so the same initial embeddings and batches. Prints each run's evaluations and
# writes both validation curves to one SVG.
#   bash bench/moe_quality.sh [build] [corpus] [iterations] [out.svg]
set -euo pipefail
build=${1:-build}
corpus=${2:-$(dirname "$0")/../../shared/data/tinyshakespeare.txt}
iters=${3:-2000}
svg=${4:-moe-quality.svg}
tandem="$build/tools/tandem"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

grep -m1 "model name" /proc/cpuinfo || true
flags=(train --model gpt --text "$corpus" --max-iters "$iters" --no-progress)
start=$(date +%s)
"$tandem" "${flags[@]}" --log-dir "$tmp/dense" >"$tmp/dense.txt"
echo "dense: $(($(date +%s) - start)) s"
start=$(date +%s)
"$tandem" "${flags[@]}" --n-experts 8 --top-k 2 --moe-ffn-hidden-size 256 --log-dir "$tmp/moe" \
  >"$tmp/moe.txt"
echo "MoE 8 experts, top-2, 2C wide: $(($(date +%s) - start)) s"
for run in dense moe; do
  echo "$run:"
  grep "^tandem train\|^step" "$tmp/$run.txt"
done
python3 "$(dirname "$0")/loss_curves_svg.py" "$svg" "dense GPT=$tmp/dense/metrics.jsonl" \
  "MoE 8x top-2=$tmp/moe/metrics.jsonl"
echo "curves: $svg"
