#!/usr/bin/env bash
# tools/cpu-bench-remote.sh — issue 17's CPU benchmarks on another host's processor: the GPU
# machine the device tool lends has an Intel Xeon (AVX-512, AMX) where these machines have AMD,
# and no package registry. Two halves, like gpu-check.sh:
#
#   bash tools/cpu-bench-remote.sh pack [MARCH]   # here: build Tandem (default -march=x86-64-v4,
#                                                 # which both Zen 4 and Sapphire Rapids run) and
#                                                 # gather its static libraries, headers and the
#                                                 # Debian libraries they need into
#                                                 # cpu-bench.tar.xz (git-ignored, ~17 MB)
#   bash tools/cpu-bench-remote.sh run [cpu-bench.tar.xz] [ROUNDS]
#                                                 # there (carry the tarball): compile
#                                                 # train_step_bench and cnn_layers_bench against
#                                                 # that machine's PyTorch libtorch, then run
#                                                 # gemm_bench, cnn_layers_bench (2 and 1 threads)
#                                                 # and train_step_bench.sh on cores 2 and 3
#
# Debian's LibTorch 1.13 (the peer on these machines) is about 500 MB with its dependencies, over
# what the device tool carries, so the peer there is whatever PyTorch the image has (2.11 when
# this was written, with its own oneDNN): say so beside the numbers. If `tandem devices` reports
# OpenBLAS on kernels narrower than the CPU's (a CPU its table lacks), the run sets the
# OPENBLAS_CORETYPE it names, for both frameworks, and prints that it did.
set -euo pipefail
mode=${1:-}
root=$(cd "$(dirname "$0")/.." && pwd)

pack() {
  local march=${1:-x86-64-v4} build="$root/build-cpu-bench" out="$root/cpu-bench"
  bash "$root/scripts/setup.sh"
  cmake -S "$root" -B "$build" -G Ninja -DTANDEM_WITH_CUDA=OFF -DTANDEM_MARCH="$march" \
    -DTANDEM_BUILD_BENCH=ON -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$build" --target tandem_cli gemm_bench train_step_bench cnn_layers_bench
  rm -rf "$out" && mkdir -p "$out/lib" "$out/so" "$out/bin"
  cp -rL "$build/include" "$out/"
  cp "$build"/*/libtandem_*.a "$out/lib/"
  cp "$build/tools/tandem" "$build/bench/gemm_bench" "$out/bin/" && strip "$out"/bin/*
  # The Debian libraries Tandem links, less the C and C++ runtimes (the image has newer ones).
  ldd "$build/tools/tandem" "$build/bench/gemm_bench" | awk '$3 ~ /^\// {print $1, $3}' | sort -u |
    grep -Ev '^(libc|libm|libpthread|librt|libdl|libstdc\+\+|libgcc_s|libgomp|ld-linux[^ ]*)\.so' |
    while read -r name path; do cp -L "$path" "$out/so/$name"; done
  echo "$march $(git -C "$root" rev-parse --short HEAD)" >"$out/build"
  tar -cJf "$root/cpu-bench.tar.xz" -C "$root" cpu-bench
  du -sh "$root/cpu-bench.tar.xz"
}

run() {
  local tarball=${1:-cpu-bench.tar.xz} rounds=${2:-5}
  tar -xJf "$tarball" -C /tmp
  local c=/tmp/cpu-bench t abi pin="taskset -c 2,3"
  t=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
  abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  echo "Tandem $(cat $c/build) (march, commit); peer: libtorch $(python3 -c 'import torch; print(torch.__version__)')"
  lscpu | grep -E 'Model name|^Model:|^CPU\(s\)'
  export LD_LIBRARY_PATH=$c/so:$t/lib
  mkdir -p /tmp/cpu-bench-bin/bench
  for b in train_step_bench cnn_layers_bench; do
    g++ -O3 -DNDEBUG -std=c++20 -D_GLIBCXX_USE_CXX11_ABI="$abi" -DTANDEM_HAS_CUDA=0 -w \
      -I$c/include -isystem "$t/include" -isystem "$t/include/torch/csrc/api/include" \
      "$root/bench/$b.cpp" -o /tmp/cpu-bench-bin/bench/$b \
      $c/lib/libtandem_parallel.a $c/lib/libtandem_data.a $c/lib/libtandem_nn.a \
      $c/lib/libtandem_autograd.a $c/lib/libtandem_core.a \
      -L$c/so -l:libgloo.so.0 -l:libz.so.1 -l:libdnnl.so.2 -l:libopenblas.so.0 \
      -Wl,-rpath-link,$c/so -L"$t/lib" -ltorch -ltorch_cpu -lc10 -Wl,-rpath,"$t/lib" -fopenmp \
      -lpthread -ldl &
  done
  wait
  local fix
  fix=$($c/bin/tandem devices | sed -n 's/.*OPENBLAS_CORETYPE=\([A-Z]*\) at start-up.*/\1/p' | head -1)
  if [ -n "$fix" ]; then
    echo "OpenBLAS runs kernels narrower than this CPU's: OPENBLAS_CORETYPE=$fix for both frameworks"
    export OPENBLAS_CORETYPE=$fix
  fi
  $c/bin/tandem devices | grep -E 'matmul|convolution'
  echo "== gemm_bench, 2 cores"
  OPENBLAS_NUM_THREADS=2 timeout 120 $pin $c/bin/gemm_bench 2>&1 | tail -7
  for th in 2 1; do
    echo "== cnn_layers_bench --threads $th"
    OPENBLAS_NUM_THREADS=$th timeout 120 $pin /tmp/cpu-bench-bin/bench/cnn_layers_bench \
      --threads "$th" --reps 30 2>&1 | tail -9
  done
  echo "== train_step_bench.sh, $rounds rounds"
  timeout 360 $pin bash "$root/bench/train_step_bench.sh" /tmp/cpu-bench-bin "$rounds"
}

case "$mode" in
  pack) pack "${2:-}" ;;
  run) run "${2:-}" "${3:-}" ;;
  *) echo "usage: $0 pack [MARCH] | run [cpu-bench.tar.xz] [ROUNDS]" >&2; exit 2 ;;
esac
