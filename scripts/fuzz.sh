#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [TARGET...] — builds the libFuzzer targets (tests/fuzz/) with clang,
# ASan and UBSan, and runs each for SECONDS (default 30) on a copy of its seed corpus. A crash, a
# leak, a timeout or an out-of-memory fails the script and leaves the input that caused it in
# build-sanitize/findings/<target>/: turn each one into a unit test that reproduces it.
# The build is the sanitizer suite's tree (scripts/sanitize.sh), so in CI it costs nothing more.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_safetensors fuzz_idx fuzz_store_protocol fuzz_options)

dir=build-sanitize
bash scripts/sanitize.sh address,undefined --configure-only
cmake --build $dir --target "${targets[@]}"

status=0
for t in "${targets[@]}"; do
  work=$dir/corpus/$t findings=$dir/findings/$t
  mkdir -p "$work" "$findings"
  cp -n tests/fuzz/corpus/$t/* "$work/"  # grows across runs; the committed seeds stay as they are
  log=$dir/$t.log
  # -rss_limit_mb/-malloc_limit_mb: a parser that trusts a length field and allocates it is a
  # finding, not a slow run. -timeout: one input taking over 10 s is a hang.
  if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$dir/tests/fuzz/$t" "$work" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -timeout=10 -artifact_prefix="$findings/" -print_final_stats=1 \
    >"$log" 2>&1; then
    execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
    echo "fuzz: $t OK: $execs inputs in ${seconds} s, $cov, corpus $(ls "$work" | wc -l) inputs"
  else
    echo "fuzz: $t FAILED; the end of its log ($log):"
    tail -30 "$log"
    status=1
  fi
done
exit $status
