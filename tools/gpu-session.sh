#!/usr/bin/env bash
# tools/gpu-session.sh — every part of tools/gpu-check.sh in one call of the device tool, most
# important first, each started only while the deadline leaves it room: a lent GPU comes with
# 15 minutes in all, a machine's start takes one or two, one call may run 10, so one call it is.
#
#   bash tools/gpu-session.sh [BUNDLE.tar.xz] [SECONDS]    # on the GPU machine; SECONDS: 560
#   PARTS="tests profile bench" bash tools/gpu-session.sh ...  # only the parts with these labels
#
# Order: the CUDA tests; where the GPT step's time goes (gpt_bench); GPT-2 124M's step and MFU on
# both sides (gpt_bench mfu, gpt_torch.py --mfu), Tandem's kernel by kernel; the CNN and ResNet-18
# steps kernel by kernel (gpu_bench --profile); nanoGPT's whole GPU recipe,
# 5,000 iterations by Tandem under bf16 autocast as nanoGPT runs it (validation every 1,000 over
# 200 batches: nanoGPT's published loss is at 5,000); the same recipe for 300 iterations by PyTorch
# eager (bf16 and float32), Tandem in float32 and torch.compile (bf16), tokens/s side by side; the
# GPU benchmarks; compute-sanitizer with what time is left. Writes $OUT/session.md (every part's
# results.md, in order) and $OUT/logs.tar.xz (every log), refreshed after each part, so a call cut
# off at its limit still brings back what finished.
set -uo pipefail
tarball=${1:-gpu-bundle.tar.xz}
deadline=$((SECONDS + ${2:-560}))
out=${OUT:-/tmp/gpu-session}
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=/tmp/$(basename "$tarball" .tar.xz)
mkdir -p "$out" /tmp/gpu-session-logs
left() { echo $((deadline - SECONDS)); }

# part NAME LABEL MIN_SECONDS [VAR=VALUE...]: gpu-check.sh's part NAME, if MIN_SECONDS are left
# (and, when PARTS lists labels, if LABEL is one of them).
part() {
  local name=$1 label=$2 need=$3
  shift 3
  [[ -z ${PARTS:-} || " $PARTS " == *" $label "* ]] || return 0
  if (($(left) < need)); then
    echo -e "\n## $label: skipped ($(left) s left, needs $need)" >>"$out/session.md"
    return
  fi
  local t0=$SECONDS rc=0 limit=$(($(left) - 10))
  # Never past the deadline: the device tool's own limit would end the call with nothing written.
  # The part runs in a session of its own (setsid: its pid is the session's id), so that cutting
  # it reaches every process under it, also those the inner `timeout`s moved to groups of their
  # own; one left running would hold the GPU and write into the next part's results.md. Exit 124
  # in session.md says a part was cut.
  env "$@" setsid bash "$root/tools/gpu-check.sh" run "$tarball" "$name" >/dev/null 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null && ((SECONDS - t0 < limit)); do sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then
    pkill -KILL -s "$pid"
    wait "$pid" 2>/dev/null
    rc=124
  else
    wait "$pid" || rc=$?
  fi
  {
    echo -e "\n## $label: exit $rc, $((SECONDS - t0)) s\n"
    cat "$bundle/results.md" 2>/dev/null
  } >>"$out/session.md"
  # Keep this part's logs under its label (the next part of the same name overwrites them).
  mkdir -p "/tmp/gpu-session-logs/$label"
  cp "$bundle"/*.log "$bundle"/*.txt "/tmp/gpu-session-logs/$label/" 2>/dev/null
  echo $rc >"/tmp/gpu-session-logs/$label/exit-status"
  rm -f "$bundle"/*.log "$bundle"/*.txt
  tar -cJf "$out/logs.tar.xz" -C /tmp gpu-session-logs
}

echo "# GPU session — $(date -u '+%Y-%m-%d %H:%M') UTC, deadline $(left) s" >"$out/session.md"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$out/session.md"
short=(GPT_ITERS=300 GPT_EVAL_INTERVAL=300 GPT_EVAL_ITERS=20 GPT_TIMEOUT=150)
part tests tests 60 CPU_CASES=0  # the CUDA cases; CI runs the rest
part profile profile 60
part mfu mfu 90  # GPT-2 124M's shape: tokens/s and MFU, Tandem and PyTorch (eager, compiled)
part kernels kernels 60  # the CNN and ResNet-18 steps kernel by kernel
# The full recipe first among the GPT runs (its result is the one nothing else gives), leaving
# 130 s for PyTorch's eager runs after it.
part gpt-tandem gpt-tandem-5000-bf16 200 GPT_ITERS=5000 GPT_EVAL_INTERVAL=1000 GPT_EVAL_ITERS=200 \
  GPT_TIMEOUT=$(($(left) - 130)) GPT_AMP=bf16
part gpt-torch gpt-torch-300-bf16 40 "${short[@]}" GPT_AMP=bf16
part gpt-tandem gpt-tandem-300-bf16 40 "${short[@]}" GPT_AMP=bf16
part gpt-torch gpt-torch-300 40 "${short[@]}" GPT_AMP=
part gpt-tandem gpt-tandem-300 40 "${short[@]}" GPT_AMP=
part gpt-compile gpt-compile-300-bf16 90 "${short[@]}" GPT_AMP=bf16
# The benchmarks: 3 interleaved runs of each side take ~360 s on an H200, PyTorch's compiled
# columns a few minutes more; gpu_bench.sh fits what it can in the time left (BENCH_SECONDS).
part bench bench 150 BENCH_SECONDS=$(($(left) - 30))
part sanitize sanitize 40 SANITIZE_TIMEOUT=$((($(left) - 15) / 9))
echo -e "\nsession ended with $(left) s before the deadline" >>"$out/session.md"
