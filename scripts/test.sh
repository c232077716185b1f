#!/usr/bin/env bash
# scripts/test.sh — set up, check the source rules, build with warnings as errors, run every test;
# then compile the CPU kernels for every host kind, run the suite under ASan + UBSan, the
# threaded tests under TSan, and fuzz.
# This is README's test command and exactly what CI runs (.ci/run). TANDEM_MARCH=<target> builds
# for another CPU than this one's (default native).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/check_source.sh
# CUDA as PTX for compute_90 only: CI checks that the CUDA code compiles (no GPU runs it here);
# the machine code for sm_90 (ptxas, a third of nvcc's time) is made where a GPU runs it
# (tools/gpu-check.sh pack), or at load time from this PTX.
cmake -S . -B build -G Ninja -DTANDEM_WERROR=ON -DTANDEM_MARCH="${TANDEM_MARCH:-native}" \
  -DCMAKE_CUDA_ARCHITECTURES=90-virtual
cmake --build build
ctest --test-dir build --output-on-failure --parallel 2
bash scripts/check_targets.sh  # the CPU kernels compile warning-free for the other host kind
bash scripts/sanitize.sh       # clang, ASan + UBSan: the CPU tests again (sanitize.sh says which)
bash scripts/sanitize.sh thread  # clang, TSan: the tests that start threads or processes
bash scripts/fuzz.sh 10        # each libFuzzer target for 10 s on its seed corpus
