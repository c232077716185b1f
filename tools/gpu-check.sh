#!/usr/bin/env bash
# tools/gpu-check.sh — the CUDA test suite (and, as they land, the GPU benchmarks) on a machine
# with a GPU but no package registry (this project's H100/H200 machines: CUDA 13, CMake, ninja,
# PyTorch, no apt). Dependencies come from here, so it has two halves:
#
#   bash tools/gpu-check.sh pack [BUNDLE]   # on a dev machine (Debian): build with CUDA for sm_90,
#                                           # gather the test programs and the shared libraries
#                                           # they need that the GPU image lacks (Gloo, OpenBLAS…)
#   bash tools/gpu-check.sh run  [BUNDLE] [tests|bench]
#                                           # on the GPU machine: run them (both halves by default;
#                                           # one per call fits the device tool's 10 minutes), write
#                                           # BUNDLE/results.md (BUNDLE may be the BUNDLE.tar.xz that
#                                           # pack writes)
#   bash tools/gpu-check.sh run  [BUNDLE] gpt-tandem|gpt-torch|gpt-compile
#                                           # nanoGPT's GPU recipe on tiny Shakespeare (6 layers, 384
#                                           # wide, context 256, batch 64, dropout 0.2, 5,000
#                                           # iterations; GPT_ITERS, GPT_EVAL_INTERVAL (250) and
#                                           # GPT_EVAL_ITERS (200) override; GPT_AMP=bf16 for
#                                           # autocast, as nanoGPT runs it) by Tandem, PyTorch
#                                           # eager or torch.compile: one per call, each under 9
#                                           # minutes; results in BUNDLE/gpt-*.txt
#   bash tools/gpu-check.sh run  [BUNDLE] profile
#                                           # bench/gpt_bench on cuda:0: the GPU recipe's step and
#                                           # its parts, and attention alone, T = 64 … 2048
#   bash tools/gpu-check.sh run  [BUNDLE] mfu
#                                           # GPT-2 124M's shape at context 1,024, batch MFU_BATCH
#                                           # (16), bf16: step time, tokens/s and MFU against
#                                           # MFU_PEAK (989 TFLOP/s, H100 SXM) by gpt_bench mfu
#                                           # and gpt_torch.py --mfu (eager, torch.compile),
#                                           # and Tandem's step kernel by kernel, with the
#                                           # tensor-core attention (--flash on) and without
#   bash tools/gpu-check.sh run  [BUNDLE] kernels
#                                           # the CNN (batch 256, 4,096) and ResNet-18 steps
#                                           # kernel by kernel (gpu_bench --profile)
#   bash tools/gpu-check.sh run  [BUNDLE] sanitize
#                                           # compute-sanitizer (memcheck, racecheck, synccheck,
#                                           # initcheck) over the GPT's ops and the fast CUDA
#                                           # tests, and memcheck over 3 GPT training steps
#
# CUDA's own libraries (cudart, cuBLAS, cuDNN, NCCL) are not carried: `run` finds them in the CUDA
# toolkit and in PyTorch's nvidia-* wheels there. The build targets x86-64-v3 (AVX2), not this
# machine's -march=native, so it runs on the GPU machine's processor. BUNDLE defaults to
# gpu-bundle (git-ignored; carry it with the device tool).
set -euo pipefail
mode=${1:-}
bundle=${2:-gpu-bundle}
part=${3:-all}
root=$(cd "$(dirname "$0")/.." && pwd)

pack() {
  bash "$root/scripts/setup.sh"
  cmake -S "$root" -B "$root/build-gpu" -G Ninja -DTANDEM_WITH_CUDA=ON -DTANDEM_MARCH=x86-64-v3 \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DTANDEM_BUILD_BENCH=ON \
    -DTANDEM_USE_BLAS=OFF >/dev/null  # OpenBLAS alone is 36 MB of the device tool's 64 MiB carry
  cmake --build "$root/build-gpu"
  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/lib"
  local progs=("$root"/build-gpu/tests/tandem_*_tests "$root/build-gpu/tools/tandem"
               "$root/build-gpu/tools/tandem_launch_test" "$root/build-gpu/tools/tandem_launch_test_worker"
               "$root/build-gpu/tools/tandem_train_smoke_test"
               "$root/build-gpu/bench/gpu_bench" "$root/build-gpu/bench/gpt_bench"
               "$root/build-gpu/bench/loss_match")
  for p in "${progs[@]}"; do
    cp "$p" "$bundle/bin/" && strip "$bundle/bin/$(basename "$p")"
  done
  # Shared libraries the GPU image lacks: everything but the C runtime and CUDA's own.
  for p in "${progs[@]}"; do ldd "$p"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libpthread|librt|libdl|ld-linux[^/]*|libcuda|libcudart|libnccl|libcublas[^/]*|libcudnn[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$bundle/lib/"; done
  cp "$root/bench/gpu_bench.sh" "$root/bench/gpu_bench_torch.py" "$root/bench/gpu_bench_report.py" \
    "$root/bench/gpt_torch.py" \
    "$bundle/bin/"
  # The GPT recipe's corpus (benchmarks only: ../shared/data, beside the checkout).
  local corpus="$root/../shared/data/tinyshakespeare.txt"
  if [ -f "$corpus" ]; then cp "$corpus" "$bundle/bin/"; else echo "note: no $corpus: gpt-* parts skip"; fi
  git -C "$root" rev-parse --short HEAD >"$bundle/commit"
  # Every program embeds the sm_90 kernels (~7 MB each, 68 MB in all): over the device tool's
  # 64 MiB carry limit, but xz brings it to ~23 MB. Carry the tarball.
  tar -cJf "$bundle.tar.xz" "$bundle"
  du -sh "$bundle" "$bundle.tar.xz"
}

run() {
  if [[ "$bundle" == *.tar.xz ]]; then  # the carried tarball: unpack it in /tmp, once a machine
    local unpacked=/tmp/$(basename "$bundle" .tar.xz)
    [ -f "$unpacked/commit" ] || tar -xJf "$bundle" -C /tmp
    bundle=$unpacked
  fi
  # CUDA libraries: the toolkit's, then PyTorch's wheels (nvidia/*/lib), as the image has them.
  local cuda_libs
  cuda_libs=$(python3 - <<'PY' 2>/dev/null || true
import glob, os
try:
    import nvidia
    base = os.path.dirname(nvidia.__path__[0] + "/")
    print(":".join(sorted(glob.glob(os.path.join(base, "*", "lib")))))
except Exception:
    pass
PY
)
  # Only Tandem's programs get the bundle's libraries (Debian's libstdc++, libgomp…): PyTorch,
  # in the benchmarks, keeps its own.
  local libs="$bundle/lib:/usr/local/cuda/lib64${cuda_libs:+:$cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Test data the programs read (tests/fixtures), from this checkout rather than the build's path.
  export TANDEM_TEST_FIXTURES="$root/tests/fixtures"
  # The tests that run `tandem` as a user would: the bundle's copy, not the build's path.
  export TANDEM_CLI_PATH="$bundle/bin/tandem"
  local out="$bundle/results.md"
  {
    echo "# GPU check — $(date -u +%Y-%m-%d), commit $(cat "$bundle/commit" 2>/dev/null || echo '?'), part: $part"
    echo
    echo '```'
    nvidia-smi -L || echo "nvidia-smi failed"
    LD_LIBRARY_PATH="$libs" "$bundle/bin/tandem" devices || true
    echo '```'
    echo
  } >"$out"
  local status=0
  if [[ "$part" == gpt-* ]]; then
    run_gpt "$libs" "$out" || status=1
    cat "$out"
    return $status
  fi
  if [ "$part" = profile ]; then  # where the GPT step's time goes on the GPU, and attention
    {
      echo '```'
      for amp in none bf16; do
        LD_LIBRARY_PATH="$libs" timeout 120 "$bundle/bin/gpt_bench" step --device cuda:0 \
          --recipe gpu --rounds 3 --amp $amp || status=1
      done
      LD_LIBRARY_PATH="$libs" timeout 240 "$bundle/bin/gpt_bench" attention --device cuda:0 \
        --rounds 3 || status=1
      echo '```'
    } >>"$out" 2>&1
    cat "$out"
    return $status
  fi
  if [ "$part" = mfu ]; then  # GPT-2 124M at context 1,024: tokens/s and MFU, both frameworks
    local batch=${MFU_BATCH:-16}
    {
      echo '```'
      # The tensor-core attention first (written without a GPU: its tests run in the tests part),
      # then what Auto takes without it; the kernel table of each.
      for flash in on off; do
        LD_LIBRARY_PATH="$libs" timeout 150 "$bundle/bin/gpt_bench" mfu --device cuda:0 --amp bf16 \
          --batch "$batch" --rounds 3 --profile 30 --flash $flash || status=1
      done
      # The classifier's loss on 16-bit logits in place against a float32 copy (time, peak bytes).
      LD_LIBRARY_PATH="$libs" timeout 60 "$bundle/bin/gpt_bench" loss --device cuda:0 \
        --batch "$batch" --rounds 5 || status=1
      for compile in "" --compile; do
        timeout 240 python3 "$bundle/bin/gpt_torch.py" --mfu --device cuda --amp bf16 \
          --batch-size "$batch" --rounds 3 --peak-tflops "${MFU_PEAK:-989}" $compile || status=1
      done
      echo '```'
    } >>"$out" 2>&1
    cat "$out"
    return $status
  fi
  if [ "$part" = kernels ]; then  # the kernel tables of the CNN and ResNet-18 steps
    {
      echo '```'
      LD_LIBRARY_PATH="$libs" timeout 200 "$bundle/bin/gpu_bench" --profile || status=1
      echo '```'
    } >>"$out" 2>&1
    cat "$out"
    return $status
  fi
  if [ "$part" = sanitize ]; then
    run_sanitize "$libs" "$out" || status=1
    cat "$out"
    return $status
  fi
  [ "$part" = bench ] || run_tests "$libs" "$out" || status=1
  if [ "$part" != tests ]; then
    {
      echo
      echo "GPU benchmarks (Tandem vs PyTorch, same GPU, interleaved runs; times: lower ratio is"
      echo "better, TFLOP/s: higher is better):"
      echo
      BENCH_RAW_DIR="$bundle" bash "$bundle/bin/gpu_bench.sh" "$bundle/bin/gpu_bench" "$libs" 2>&1 ||
        status=1
    } >>"$out"
  fi
  echo -e "\nLogs: $bundle/*.log. Exit status $status." >>"$out"
  cat "$out"
  return $status
}

# One row of results.md per test program and filter: counts from its XML report, or "crashed"
# when it wrote none (a segfault, an abort), so one crash does not end the whole check.
run_one() {
  local libs=$1 out=$2 t=$3 filter=$4 tag=$5
  local name xml log
  name=$(basename "$t")
  xml="$bundle/$name$tag.xml" log="$bundle/$name$tag.log"
  rm -f "$xml"
  local rc=0
  # 4 minutes a program: a hang becomes a row of the report, within the device tool's 10 minutes.
  LD_LIBRARY_PATH="$libs" timeout 240 "$t" --gtest_filter="$filter" --gtest_output="xml:$xml" \
    >"$log" 2>&1 || rc=$?
  if [ ! -s "$xml" ]; then
    echo "| $name | \`$filter\` | crashed (exit $rc, no report; see $(basename "$log")) | | | |" >>"$out"
    return 1
  fi
  python3 - "$xml" "$name" "$filter" >>"$out" <<'PY' || rc=1
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
run = passed = failed = skipped = 0
for c in root.iter("testcase"):
    run += 1
    if c.find("failure") is not None: failed += 1
    elif c.get("result") == "skipped" or c.find("skipped") is not None: skipped += 1
    else: passed += 1
print(f"| {sys.argv[2]} | `{sys.argv[3]}` | {run} | {passed} | {failed} | {skipped} |")
PY
  return $rc
}

# nanoGPT's GPU recipe (config/train_shakespeare_char.py) by one framework: its output goes to
# BUNDLE/$part.txt, its last lines and the wall time to results.md.
run_gpt() {
  local libs=$1 out=$2 corpus="$bundle/bin/tinyshakespeare.txt" iters=${GPT_ITERS:-5000}
  [ -f "$corpus" ] || { echo "no $corpus in the bundle: $part skipped" >>"$out"; return 1; }
  local recipe=(--text "$corpus" --n-layer 6 --n-head 6 --n-embd 384 --block-size 256
                --batch-size 64 --dropout 0.2 --max-iters "$iters" --eval-iters "${GPT_EVAL_ITERS:-200}"
                --eval-interval "${GPT_EVAL_INTERVAL:-250}")
  [ -z "${GPT_AMP:-}" ] || recipe+=(--amp "$GPT_AMP")  # bf16: autocast, nanoGPT's GPU setting
  local log="$bundle/$part.txt" start rc=0
  start=$(date +%s.%N)
  case "$part" in
    gpt-tandem)
      LD_LIBRARY_PATH="$libs" timeout "${GPT_TIMEOUT:-540}" "$bundle/bin/tandem" train --model gpt --device cuda:0 \
        "${recipe[@]}" --log-interval 100 --log-dir "$bundle/gpt-run" \
        >"$log" 2>&1 || rc=$? ;;
    gpt-torch | gpt-compile)
      local compile=()
      [ "$part" = gpt-compile ] && compile=(--compile)
      timeout "${GPT_TIMEOUT:-540}" python3 "$bundle/bin/gpt_torch.py" --device cuda "${compile[@]}" "${recipe[@]}" \
        >"$log" 2>&1 || rc=$? ;;
    *) echo "unknown part $part" >>"$out"; return 1 ;;
  esac
  {
    echo "$part: exit $rc, wall $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $start}") s, $iters iterations"
    echo '```'
    grep -E '^(step|result|iter [0-9]*00:)' "$log" | tail -8
    echo '```'
  } >>"$out"
  return $rc
}

# compute-sanitizer's four tools, each over the CUDA cases it can check in a minute or two (every
# launch is checked, so a program runs 10-100 times slower): the GPT's ops (attention, LayerNorm,
# embedding, GELU) in the op table, the allocator and stream tests, the layers; then memcheck
# over three training steps of a small GPT. One row each: the tool's error summary.
run_sanitize() {
  local libs=$1 out=$2 status=0 cs
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer \
    /usr/local/cuda*/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null |
    head -1 || true)
  if [ -z "$cs" ]; then
    echo "compute-sanitizer: not found on this machine (PATH, /usr/local/cuda*, /opt/nvidia)" >>"$out"
    return 1
  fi
  local ops='*CudaMatchesCpu*attention*:*CudaMatchesCpu*layer_norm*:*CudaMatchesCpu*embedding*:*CudaMatchesCpu*gelu*:*CudaMatchesCpu*batch_norm*:*CudaMatchesCpu*cross_entropy*:*CrossEntropy16Bit*OnCuda0'
  # The tensor-core attention first: written without a GPU, its shared memory is what racecheck
  # is for.
  local flash='FlashAttentionCuda.MatchesTheCpuInFloat32/*'
  local cases=("racecheck tandem_autograd_tests $flash" "memcheck tandem_autograd_tests $flash"
               "memcheck tandem_autograd_tests $ops" "memcheck tandem_core_tests *Cuda*:*cuda*:*CUDA*"
               "memcheck tandem_nn_tests *Cuda*:*cuda*:*CUDA*" "racecheck tandem_autograd_tests $ops"
               "synccheck tandem_autograd_tests $ops" "initcheck tandem_nn_tests *Cuda*:*cuda*:*CUDA*"
               "memcheck tandem_autograd_tests BackwardStreamsCuda.*"
               "racecheck tandem_nn_tests AdamMany.*Cuda*:CudaSync.*")
  { echo "| tool | program | filter | exit | summary |"; echo "|---|---|---|---|---|"; } >>"$out"
  local c tool prog filter log rc
  for c in "${cases[@]}"; do
    read -r tool prog filter <<<"$c"
    log="$bundle/sanitize-$tool-$prog.log" rc=0
    LD_LIBRARY_PATH="$libs" timeout "${SANITIZE_TIMEOUT:-150}" "$cs" --tool "$tool" --error-exitcode 3 \
      "$bundle/bin/$prog" --gtest_filter="$filter" >"$log" 2>&1 || rc=$?
    [ $rc = 0 ] || status=1
    echo "| $tool | $prog | \`$filter\` | $rc | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$log" | tr '\n' ' ') |" >>"$out"
  done
  local corpus="$bundle/bin/tinyshakespeare.txt" rc=0
  [ -f "$corpus" ] || corpus="$root/README.md"
  log="$bundle/sanitize-memcheck-train.log"
  LD_LIBRARY_PATH="$libs" timeout "${SANITIZE_TIMEOUT:-150}" "$cs" --tool memcheck --error-exitcode 3 \
    "$bundle/bin/tandem" train --model gpt --device cuda:0 --text "$corpus" --n-layer 2 --n-head 2 \
    --n-embd 64 --block-size 32 --batch-size 4 --dropout 0.1 --max-iters 3 --warmup-iters 1 \
    --eval-interval 3 \
    --eval-iters 1 --log-dir "$bundle/sanitize-run" >"$log" 2>&1 || rc=$?
  [ $rc = 0 ] || status=1
  echo "| memcheck | tandem train --model gpt (3 steps, dropout) | | $rc | $(grep 'ERROR SUMMARY' "$log" | tail -1) |" >>"$out"
  return $status
}

run_tests() {
  local libs=$1 out=$2 status=0
  local cuda='*Cuda*:*cuda*:*CUDA*:*Nccl*:*NCCL*:*SavesTensorsFromAnyDevice*'
  {
    echo "| test program | filter | run | passed | failed | skipped |"
    echo "|---|---|---|---|---|---|"
  } >>"$out"
  for t in "$bundle"/bin/tandem_*_tests "$bundle/bin/tandem_train_smoke_test"; do
    if [ "$(basename "$t")" = tandem_parallel_tests ]; then
      # The parallel tests fork ranks, and a child cannot use CUDA once its parent has: the
      # collectives that fork CUDA ranks run in a process of their own, then the other CUDA cases
      # (pipelines, DataParallel on cuda:0) in another, then every CPU case in a third.
      run_one "$libs" "$out" "$t" 'CudaCollectives.*' .collectives || status=1
      run_one "$libs" "$out" "$t" "$cuda-CudaCollectives.*" .cuda || status=1
      # (CPU_CASES=0 leaves these out: they need no GPU, and CI runs them.)
      [ "${CPU_CASES:-1}" = 0 ] || run_one "$libs" "$out" "$t" "-$cuda" .rest || status=1
    else
      run_one "$libs" "$out" "$t" "$cuda" "" || status=1
    fi
  done
  return $status
}

case "$part" in all | tests | bench | profile | mfu | kernels | sanitize | gpt-tandem | gpt-torch | gpt-compile) ;; *) mode=usage ;; esac
case "$mode" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: $0 pack [BUNDLE] | run [BUNDLE] [tests|bench|profile|mfu|kernels|sanitize|gpt-tandem|gpt-torch|gpt-compile]" >&2
     exit 2 ;;
esac
