#!/usr/bin/env bash
# bench/gpu_bench.sh — Tandem vs PyTorch eager on the same GPU, in one run, as ratios (issue
# bars: training steps Tandem/PyTorch <= 1.0; GEMM 4096³ >= 90 % of torch.mm's rate; issue 16:
# the CNN step at batch 256 under autocast <= 1.0, the bf16 GEMM >= 0.70 of torch.mm's).
#   bench/gpu_bench.sh [path/to/gpu_bench] [LD_LIBRARY_PATH for it]
#   (default build-gpu/bench/gpu_bench; the library path is Tandem's only, PyTorch keeps its own)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tandem_bin=${1:-build-gpu/bench/gpu_bench}
t=$(LD_LIBRARY_PATH="${2:-${LD_LIBRARY_PATH:-}}" "$tandem_bin")
p=$(python3 "$here/gpu_bench_torch.py")
echo "$t" | head -1
printf "%-16s %12s %12s %10s\n" benchmark Tandem PyTorch ratio
for key in cnn_b64_ms cnn_b256_ms cnn_bn_b256_ms cnn_b256_bf16_ms cnn_b256_fp16_ms mlp_b256_ms gemm4096_tflops \
  gemm4096_bf16_tflops; do
  a=$(echo "$t" | awk -v k=$key '$1 == k {print $2}')
  b=$(echo "$p" | awk -v k=$key '$1 == k {print $2}')
  unit=$(echo "$t" | awk -v k=$key '$1 == k {print $3}')
  # Times: Tandem / PyTorch (lower is better); rates: Tandem / PyTorch (higher is better).
  printf "%-16s %9s %s %9s %s %9.3f\n" "$key" "$a" "$unit" "$b" "$unit" "$(awk -v a="$a" -v b="$b" 'BEGIN {print a / b}')"
done
# PyTorch at its best on the same steps (gpu_bench_torch.py says what each column is); the ratio
# is Tandem over the fastest of them.
echo
printf "%-14s %9s %9s %9s %9s %9s %10s\n" step Tandem eager tuned compile reduce-ov Tandem/best
for key in cnn_b64_ms cnn_b256_ms cnn_bn_b256_ms mlp_b256_ms; do
  get() { echo "$p" | awk -v k="$1" '$1 == k {print $2}'; }
  a=$(echo "$t" | awk -v k=$key '$1 == k {print $2}')
  e=$(get $key) tu=$(get ${key}_tuned) co=$(get ${key}_compile) ro=$(get ${key}_ro)
  best=$(printf "%s\n" $e $tu $co $ro | sort -g | head -1)
  printf "%-14s %9s %9s %9s %9s %9s %10.3f\n" "$key" "$a" "$e" "${tu:--}" "${co:--}" "${ro:--}" \
    "$(awk -v a="$a" -v b="$best" 'BEGIN {print a / b}')"
done
