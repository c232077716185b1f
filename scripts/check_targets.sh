#!/usr/bin/env bash
# scripts/check_targets.sh — compiles the CPU kernels (core/kernels/cpu and every file that reaches
# Eigen through them) for each x86-64 target our machines can be, with warnings as errors.
#
# Why: GCC's warnings depend on the target. With AVX-512 enabled, GCC 12 warns inside its own
# intrinsics as inlined through Eigen, and that once failed README's test command on an Intel host
# while CI, on another CPU, stayed green. This check needs none of the hardware: it only compiles
# (a dozen object files per target, cached by ccache). Usage: bash scripts/check_targets.sh [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(x86-64-v2 x86-64-v3 znver4 sapphirerapids)

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
    -DTANDEM_BUILD_EXAMPLES=OFF -DTANDEM_BUILD_TESTS=ON >/dev/null
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
