#!/usr/bin/env bash
# scripts/test.sh — set up, check the source rules, build with warnings as errors, run every test.
# This is README's test command and exactly what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/check_source.sh
cmake -S . -B build -G Ninja -DTANDEM_WERROR=ON
cmake --build build
ctest --test-dir build --output-on-failure --parallel 2
