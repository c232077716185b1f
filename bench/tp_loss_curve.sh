#!/usr/bin/env bash
# bench/tp_loss_curve.sh — does tensor parallelism train the same GPT in bf16? nanoGPT's CPU
# recipe on a corpus (default: tiny Shakespeare), 2,000 iterations under --amp bf16, trained by
# one process (TP = 1, 2 threads) and by `tandem launch` with --tp 2 (2 processes, 1 thread each),
# for two seeds each. Within a seed the two start from the same weights and see the same batches,
# so they differ only by bf16 rounding in a different order; across seeds TP = 1 shows the
# run-to-run noise. Prints the validation loss at every evaluation of the four runs and the
# largest gaps: |TP 2 - TP 1| for the same seed beside |seed 0 - seed 1| at TP = 1.
#   bash bench/tp_loss_curve.sh [build] [corpus] [iterations]
set -euo pipefail
build=${1:-build}
corpus=${2:-$(dirname "$0")/../../shared/data/tinyshakespeare.txt}
iters=${3:-2000}
tandem="$build/tools/tandem"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

grep -m1 "model name" /proc/cpuinfo || true
echo "corpus: $corpus; $iters iterations of nanoGPT's CPU recipe, --amp bf16 --vocab-multiple 2"
flags=(train --model gpt --text "$corpus" --max-iters "$iters" --amp bf16 --vocab-multiple 2
  --log-interval 250 --no-progress)
for seed in 0 1; do
  start=$(date +%s)
  TANDEM_NUM_THREADS=2 "$tandem" "${flags[@]}" --seed "$seed" --log-dir "$tmp/tp1-$seed" \
    >"$tmp/tp1-$seed.txt"
  echo "TP = 1, seed $seed: $(($(date +%s) - start)) s"
  start=$(date +%s)
  "$tandem" launch --standalone --nproc-per-node 2 -- "$tandem" "${flags[@]}" --seed "$seed" \
    --tp 2 --log-dir "$tmp/tp2-$seed" >"$tmp/tp2-$seed.txt" 2>&1
  echo "TP = 2, seed $seed: $(($(date +%s) - start)) s"
done

python3 - "$tmp" <<'PY'
import json, sys
runs = ["tp1-0", "tp2-0", "tp1-1", "tp2-1"]
val = {}
for r in runs:
    with open(f"{sys.argv[1]}/{r}/metrics.jsonl") as f:
        val[r] = {m["step"]: m["loss"] for m in map(json.loads, f) if m["split"] == "eval"}
print("| iteration | TP 1, seed 0 | TP 2, seed 0 | TP 1, seed 1 | TP 2, seed 1 |")
print("|---|---|---|---|---|")
for step in sorted(val["tp1-0"]):
    print(f"| {step} | " + " | ".join(f"{val[r][step]:.4f}" for r in runs) + " |")
def gap(a, b, skip0=True):
    return max(abs(val[a][s] - val[b][s]) for s in val[a] if s > 0 or not skip0)
print(f"largest |TP 2 - TP 1|, same seed: seed 0 {gap('tp2-0', 'tp1-0'):.4f}, "
      f"seed 1 {gap('tp2-1', 'tp1-1'):.4f}")
print(f"largest |seed 0 - seed 1| at TP 1 (run-to-run noise): {gap('tp1-0', 'tp1-1'):.4f}")
last = max(val["tp1-0"])
print(f"at {last}: |TP 2 - TP 1| {abs(val['tp2-0'][last] - val['tp1-0'][last]):.4f} (seed 0), "
      f"{abs(val['tp2-1'][last] - val['tp1-1'][last]):.4f} (seed 1); "
      f"|seed 0 - seed 1| {abs(val['tp1-0'][last] - val['tp1-1'][last]):.4f} (TP 1), "
      f"{abs(val['tp2-0'][last] - val['tp2-1'][last]):.4f} (TP 2)")
PY
