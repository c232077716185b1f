#!/usr/bin/env bash
# bench/gpu_bench.sh — Tandem against PyTorch on the same GPU, in one call, as ratios (issue 35:
# Tandem <= 1.0x the time of PyTorch's best column on every model; issue 16: the CNN at batch 256
# under autocast <= 1.0, the bf16 GEMM >= 0.70 of torch.mm's). RUNS interleaved process runs of
# each side (Tandem, PyTorch, Tandem, ...; default 3), then the losses of bench/loss_match (the
# same initial weights on both sides), then PyTorch's compiled columns in a run of their own, last
# (compiling ResNet-18 takes minutes). BENCH_SECONDS bounds the whole: a further run starts only
# if the time left holds one more like the last and the losses, the compiled run only if 240 s
# are left, and is cut 20 s before the end, so the report is always printed; it says what was left
# out. bench/gpu_bench_report.py prints the medians and ranges.
#   bench/gpu_bench.sh [path/to/gpu_bench] [LD_LIBRARY_PATH for it]
#   (default build-gpu/bench/gpu_bench; the library path is Tandem's only, PyTorch keeps its own)
# BENCH_RAW_DIR keeps each run's raw output there (bench-tandem-1.txt, ...), so a lease cut short
# still brings back the runs that finished.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tandem_bin=${1:-build-gpu/bench/gpu_bench}
tandem_libs=${2:-${LD_LIBRARY_PATH:-}}
runs=${RUNS:-3}
deadline=$((SECONDS + ${BENCH_SECONDS:-100000}))
work=${BENCH_RAW_DIR:-$(mktemp -d)}
mkdir -p "$work"
files=()
for r in $(seq 1 "$runs"); do
  t0=$SECONDS
  LD_LIBRARY_PATH="$tandem_libs" "$tandem_bin" >"$work/bench-tandem-$r.txt"
  TORCH_COMPILE=0 python3 "$here/gpu_bench_torch.py" >"$work/bench-torch-$r.txt" \
    2>"$work/bench-torch-$r.stderr.log"
  files+=("$work/bench-tandem-$r.txt" "$work/bench-torch-$r.txt")
  if ((r < runs && deadline - SECONDS < SECONDS - t0 + 30)); then  # 30 s: the losses below
    echo "note: $r of $runs runs: another would pass BENCH_SECONDS"
    break
  fi
done
# The same initial weights on both sides: Tandem writes them and trains, PyTorch loads and trains;
# their losses go with the first run's numbers.
mkdir -p "$work/init"
LD_LIBRARY_PATH="$tandem_libs" "$(dirname "$tandem_bin")/loss_match" \
  --dir "$work/init" --device cuda:0 >>"$work/bench-tandem-1.txt"
python3 "$here/gpu_bench_torch.py" --loss-match "$work/init" --device cuda:0 \
  >>"$work/bench-torch-1.txt"
if ((deadline - SECONDS >= 240)); then
  # Into a file of its own first: a run cut short leaves bench-torch-1.txt whole.
  TORCH_COMPILE=only timeout -k 5 $((deadline - SECONDS - 20)) python3 "$here/gpu_bench_torch.py" \
    >"$work/bench-torch-compile.txt" 2>"$work/bench-torch-compile.stderr.log" ||
    echo "note: the compiled run failed or was cut (exit $?): bench-torch-compile.stderr.log"
  cat "$work/bench-torch-compile.txt" >>"$work/bench-torch-1.txt"
else
  echo "note: PyTorch's compiled columns left out: $((deadline - SECONDS)) s left of BENCH_SECONDS"
fi
python3 "$here/gpu_bench_report.py" "${files[@]}"
rm -rf "$work/init"
[ -n "${BENCH_RAW_DIR:-}" ] || rm -rf "$work"
