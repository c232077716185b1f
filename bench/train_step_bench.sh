#!/usr/bin/env bash
# bench/train_step_bench.sh — Tandem vs LibTorch training-step time, as interleaved A/B process
# runs (two-thread timings on these machines jump between levels from one process to the next,
# so single runs mislead). LibTorch is measured at its best: every thread layout (torch threads ×
# OpenBLAS threads) and glibc told to keep freed memory, which is what a caching allocator gives.
#   bash bench/train_step_bench.sh [build-bench] [rounds]
set -euo pipefail
bin=${1:-build-bench}/bench/train_step_bench
rounds=${2:-5}
export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
ms() { "$@" | sed -n 's/.*median_ms=//p'; }

"$bin" --framework cpu-info
printf "%-5s %-7s %10s %10s %-22s %8s %14s\n" model threads tandem_ms torch_ms "torch best layout" ratio \
  "rounds min..max"
for model in mlp cnn; do
  for threads in 1 2; do
    layouts=("$threads:1")
    [ "$threads" -gt 1 ] && layouts+=("$threads:$threads" "1:$threads")
    tandem=() ; declare -A torch=()
    for ((r = 0; r < rounds; r++)); do
      tandem+=("$(TANDEM_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads ms "$bin" --framework tandem --model "$model" --threads "$threads")")
      for l in "${layouts[@]}"; do
        t=${l%%:*} b=${l##*:}
        torch[$l]+="$(OPENBLAS_NUM_THREADS=$b OMP_NUM_THREADS=$t ms "$bin" --framework libtorch --model "$model" --threads "$t") "
      done
    done
    tm=$(printf "%s\n" "${tandem[@]}" | median)
    best="" bestms=""
    for l in "${layouts[@]}"; do
      m=$(printf "%s\n" ${torch[$l]} | median)
      if [ -z "$bestms" ] || awk "BEGIN{exit !($m < $bestms)}"; then best=$l bestms=$m; fi
    done
    # The spread of the per-round ratios (Tandem / LibTorch's best layout, same round): on a
    # machine whose speed drifts, it says how far to trust the median.
    read -r -a best_runs <<<"${torch[$best]}"
    spread=$(for ((r = 0; r < rounds; r++)); do awk "BEGIN{print ${tandem[$r]} / ${best_runs[$r]}}"; done |
      sort -n | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%.2f..%.2f", lo, hi}')
    printf "%-5s %-7s %10.2f %10.2f %-22s %8.2f %14s\n" "$model" "$threads" "$tm" "$bestms" \
      "torch ${best%%:*} / blas ${best##*:}" "$(awk "BEGIN{print $tm / $bestms}")" "$spread"
    unset torch
  done
done
