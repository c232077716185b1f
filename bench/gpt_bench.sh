#!/usr/bin/env bash
# bench/gpt_bench.sh — Tandem's GPT against PyTorch on this host, in one run:
#   1. nanoGPT's CPU recipe on a corpus (default: ../shared/data/tinyshakespeare.txt), trained by
#      `tandem train --model gpt` and by bench/gpt_torch.py (nanoGPT's model.py and train.py) at 1
#      and 2 threads each: wall time, final validation loss, training tokens/s; the ratio is
#      Tandem's best wall time over PyTorch's best.
#   2. Where Tandem's step goes (gpt_bench step).
#   3. Attention alone, T = 64 … 2048: Tandem fused and composed (gpt_bench attention) beside
#      PyTorch's nanoGPT attention.
#   bash bench/gpt_bench.sh [build-bench] [corpus] [iterations]
set -euo pipefail
build=${1:-build-bench}
corpus=${2:-$(dirname "$0")/../../shared/data/tinyshakespeare.txt}
iters=${3:-2000}
python=/usr/bin/python3  # Debian's python3-torch
here=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$build/bench/gpt_bench" step --rounds 1 --threads 1 | head -2  # the CPU and the load
echo "corpus: $corpus, $iters iterations of nanoGPT's CPU recipe"
printf "%-8s %7s %9s %9s %10s %9s\n" who threads wall_s val_loss tokens/s ms/iter
best_tandem="" best_torch=""
for threads in 1 2; do
  start=$(date +%s.%N)
  TANDEM_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=1 "$build/tools/tandem" train --model gpt \
    --text "$corpus" --max-iters "$iters" --log-interval 50 --log-dir "$tmp/run$threads" \
    >"$tmp/tandem$threads.txt"
  wall=$(awk "BEGIN{print $(date +%s.%N) - $start}")
  val=$(sed -n 's/^step [0-9]*: train loss [0-9.]*, val loss //p' "$tmp/tandem$threads.txt" | tail -1)
  ms=$(sed -n 's/.* \([0-9.]*\) ms\/iter$/\1/p' "$tmp/tandem$threads.txt" |
    awk '{s += $1} END {print s / NR}')
  printf "%-8s %7s %9.1f %9s %10.0f %9.2f\n" tandem "$threads" "$wall" "$val" \
    "$(awk "BEGIN{print 768000 / $ms}")" "$ms"
  if [ -z "$best_tandem" ] || awk "BEGIN{exit !($wall < $best_tandem)}"; then best_tandem=$wall; fi

  start=$(date +%s.%N)
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads $python "$here/gpt_torch.py" \
    --text "$corpus" --threads "$threads" --max-iters "$iters" >"$tmp/torch$threads.txt"
  wall=$(awk "BEGIN{print $(date +%s.%N) - $start}")
  r=$(grep '^result:' "$tmp/torch$threads.txt")
  val=$(sed 's/.*val_loss=\([0-9.]*\).*/\1/' <<<"$r")
  tps=$(sed 's/.*tokens_per_s=\([0-9.]*\).*/\1/' <<<"$r")
  ms=$(sed 's/.*ms_per_iter=\([0-9.]*\).*/\1/' <<<"$r")
  printf "%-8s %7s %9.1f %9s %10.0f %9.2f\n" pytorch "$threads" "$wall" "$val" "$tps" "$ms"
  if [ -z "$best_torch" ] || awk "BEGIN{exit !($wall < $best_torch)}"; then best_torch=$wall; fi
done
echo "$(sed -n 's/^result: .*\(torch=[^ ]*\).*\(sdpa=[A-Za-z]*\).*/\1 \2/p' "$tmp/torch1.txt")"
echo "Tandem's best wall time / PyTorch's best: $(awk "BEGIN{printf \"%.2f\", $best_tandem / $best_torch}")"
echo
for threads in 1 2; do "$build/bench/gpt_bench" step --threads "$threads" | tail -n +3; echo; done

"$build/bench/gpt_bench" attention --threads 1 | tail -n +3 >"$tmp/attention.txt"
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $python "$here/gpt_torch.py" --attention --threads 1 \
  >"$tmp/torch_attention.txt"
head -1 "$tmp/attention.txt"
echo "$(head -1 "$tmp/torch_attention.txt") (nanoGPT's attention; 1 thread each)"
printf "%6s %10s %12s %10s %14s %14s %14s\n" T fused_ms composed_ms torch_ms fused/torch \
  fused_held_MB composed_MB
tail -n +3 "$tmp/attention.txt" | while read -r t fused composed _ held_f held_c; do
  torch=$(sed -n "s/^attention T=$t torch_ms=//p" "$tmp/torch_attention.txt")
  printf "%6s %10s %12s %10s %14.2f %14s %14s\n" "$t" "$fused" "$composed" "$torch" \
    "$(awk "BEGIN{print $fused / $torch}")" "$held_f" "$held_c"
done
