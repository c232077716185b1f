#!/usr/bin/env bash
# tools/gpu-session.sh — every part of tools/gpu-check.sh in one call of the device tool, most
# important first, each started only while the deadline leaves it room: a lent GPU comes with
# 15 minutes in all, a machine's start takes one or two, one call may run 10, so one call it is.
#
#   bash tools/gpu-session.sh [BUNDLE.tar.xz] [SECONDS]    # on the GPU machine; SECONDS: 560
#
# Order: the CUDA tests; nanoGPT's GPU recipe for 300 iterations by Tandem, PyTorch eager and
# torch.compile, in float32 and under bf16 autocast (tokens/s side by side; 20 batches per
# evaluation); the GPU benchmarks; Tandem's full 5,000 iterations in its faster precision
# (validation every 1,000 over 200 batches: nanoGPT's published loss is at 5,000);
# compute-sanitizer with what time is left. Writes $OUT/session.md (every part's
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

# part NAME LABEL MIN_SECONDS [VAR=VALUE...]: gpu-check.sh's part NAME, if MIN_SECONDS are left.
part() {
  local name=$1 label=$2 need=$3
  shift 3
  if (($(left) < need)); then
    echo -e "\n## $label: skipped ($(left) s left, needs $need)" >>"$out/session.md"
    return
  fi
  local t0=$SECONDS rc=0
  env "$@" bash "$root/tools/gpu-check.sh" run "$tarball" "$name" >/dev/null 2>&1 || rc=$?
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
for amp in "" bf16; do  # float32 as the tests run, then autocast bf16 as nanoGPT runs on GPUs
  part gpt-tandem "gpt-tandem-300${amp:+-$amp}" 60 "${short[@]}" GPT_AMP=$amp
  part gpt-torch "gpt-torch-300${amp:+-$amp}" 60 "${short[@]}" GPT_AMP=$amp
  part gpt-compile "gpt-compile-300${amp:+-$amp}" 90 "${short[@]}" GPT_AMP=$amp
done
part bench bench 100
# The full recipe in whichever precision ran Tandem's 300 iterations faster (and finished).
ms() {
  [ "$(cat "/tmp/gpu-session-logs/$1/exit-status" 2>/dev/null)" = 0 ] || return 0
  grep -h -o '[0-9.]* ms/iter' "/tmp/gpu-session-logs/$1/gpt-tandem.txt" | tail -1 | cut -d' ' -f1
}
full_amp=bf16
fp32=$(ms gpt-tandem-300) bf16=$(ms gpt-tandem-300-bf16)
if [ -z "$bf16" ] || { [ -n "$fp32" ] && awk "BEGIN{exit !($fp32 < $bf16)}"; }; then full_amp=; fi
part gpt-tandem "gpt-tandem-5000${full_amp:+-$full_amp}" 120 GPT_ITERS=5000 GPT_EVAL_INTERVAL=1000 \
  GPT_EVAL_ITERS=200 GPT_TIMEOUT=$(($(left) - 70)) GPT_AMP=$full_amp
part sanitize sanitize 40 SANITIZE_TIMEOUT=$((($(left) - 15) / 7))
echo -e "\nsession ended with $(left) s before the deadline" >>"$out/session.md"
