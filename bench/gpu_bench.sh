#!/usr/bin/env bash
# bench/gpu_bench.sh — Tandem against PyTorch on the same GPU, in one call, as ratios (issue 35:
# Tandem <= 1.0x the time of PyTorch's best column on every model; issue 16: the CNN at batch 256
# under autocast <= 1.0, the bf16 GEMM >= 0.70 of torch.mm's). RUNS interleaved process runs of
# each side (Tandem, PyTorch, Tandem, ...; default 3), PyTorch's compiled columns in its first run
# only (compiling costs a minute); bench/gpu_bench_report.py prints the medians and ranges, and
# the losses of bench/loss_match (the same initial weights on both sides) step by step.
#   bench/gpu_bench.sh [path/to/gpu_bench] [LD_LIBRARY_PATH for it]
#   (default build-gpu/bench/gpu_bench; the library path is Tandem's only, PyTorch keeps its own)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tandem_bin=${1:-build-gpu/bench/gpu_bench}
runs=${RUNS:-3}
work=$(mktemp -d)
files=()
for r in $(seq 1 "$runs"); do
  LD_LIBRARY_PATH="${2:-${LD_LIBRARY_PATH:-}}" "$tandem_bin" >"$work/tandem-$r.txt"
  TORCH_COMPILE=$([ "$r" = 1 ] && echo 1 || echo 0) python3 "$here/gpu_bench_torch.py" \
    >"$work/torch-$r.txt" 2>"$work/torch-$r.err"
  files+=("$work/tandem-$r.txt" "$work/torch-$r.txt")
done
# The same initial weights on both sides: Tandem writes them and trains, PyTorch loads and trains;
# their losses go with the first run's numbers.
mkdir -p "$work/init"
LD_LIBRARY_PATH="${2:-${LD_LIBRARY_PATH:-}}" "$(dirname "$tandem_bin")/loss_match" \
  --dir "$work/init" --device cuda:0 >>"$work/tandem-1.txt"
python3 "$here/gpu_bench_torch.py" --loss-match "$work/init" --device cuda:0 >>"$work/torch-1.txt"
python3 "$here/gpu_bench_report.py" "${files[@]}"
rm -rf "$work"
