#!/usr/bin/env bash
# scripts/check_targets.sh — compiles the CPU kernels (core/kernels/cpu and every file that reaches
# Eigen through them) for each x86-64 target our machines can be, with warnings as errors.
#
# Why: GCC's warnings depend on the target. With AVX-512 enabled, GCC 12 warns inside its own
# intrinsics as inlined through Eigen, and that once failed README's test command on an Intel host
# while CI, on another CPU, stayed green. This check needs none of the hardware: it only compiles
# (a dozen object files per target, cached by ccache). Usage: bash scripts/check_targets.sh [TARGET...]
#
# With no TARGET it checks the host kinds this machine is not: our machines are Intel Sapphire
# Rapids or AMD Zen 4, and the main build (-march=native) has already compiled for this one. Each
# target costs about three minutes of CI on two cores, so the rest (x86-64-v2, x86-64-v3, or both
# host kinds at once) are named when wanted: bash scripts/check_targets.sh x86-64-v2 x86-64-v3
set -euo pipefail
cd "$(dirname "$0")/.."

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  if grep -qw amx_tile /proc/cpuinfo; then targets=(znver4)  # this is the Intel kind
  elif grep -qw avx512f /proc/cpuinfo; then targets=(sapphirerapids)  # the AMD kind
  else targets=(sapphirerapids); fi  # neither (an AVX2 host): the larger instruction set, as
  # checking both took six of CI's 35 minutes; the Intel and AMD hosts' runs check znver4

fi

# The kernels, and any other source that includes them (the thread-pool test includes gemm_util.h).
mapfile -t sources < <({
  git ls-files 'core/kernels/cpu/*.cpp'
  git grep -l -E 'kernels/cpu/(eigen|gemm_util)\.h' -- '*.cpp'
} | sort -u)

# GCC 12.2 (Debian 12) predates -march=znver4; GCC 13 defines it as znver3 plus these AVX-512
# extensions, so that is what we compile for when the compiler does not know the name.
znver4_flags="-mavx512f -mavx512dq -mavx512ifma -mavx512cd -mavx512bw -mavx512vl -mavx512bf16 \
-mavx512vbmi -mavx512vbmi2 -mavx512vnni -mavx512bitalg -mavx512vpopcntdq -mgfni -mvpclmulqdq -mvaes"
knows() { echo 'int main(){}' | "${CXX:-c++}" -march="$1" -x c++ - -o /dev/null 2>/dev/null; }

status=0
for target in "${targets[@]}"; do
  march=$target extra=""
  if ! knows "$target"; then
    if [ "$target" = znver4 ] && knows znver3; then
      march=znver3 extra=$znver4_flags
    else
      echo "check_targets: the compiler does not know -march=$target" >&2
      exit 1
    fi
  fi
  dir=build-targets/$target
  cmake -S . -B "$dir" -G Ninja -DTANDEM_WERROR=ON -DTANDEM_MARCH="$march" \
    -DCMAKE_CXX_FLAGS="$extra" -DTANDEM_WITH_CUDA=OFF -DTANDEM_BUILD_TOOLS=OFF \
    -DTANDEM_BUILD_EXAMPLES=OFF -DTANDEM_BUILD_TESTS=ON -DTANDEM_UNITY_BUILD=OFF >/dev/null
  # (Unity off: the kernels must be objects of their own, for the list below to name them.)
  mapfile -t objects < <(ninja -C "$dir" -t targets all | grep -oE '^[^:]+\.cpp\.o' |
    grep -F -f <(printf '/%s.o\n' "${sources[@]#*/}") | sort -u)
  if ninja -C "$dir" "${objects[@]}" >"$dir/check.log" 2>&1; then
    echo "check_targets: $target OK (${#objects[@]} objects, -march=$march${extra:+ + AVX-512 flags})"
  else
    echo "check_targets: $target FAILED; the compiler said:"
    grep -E 'error|warning' "$dir/check.log" | head -20
    status=1
  fi
done
exit $status
