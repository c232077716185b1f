#!/usr/bin/env bash
# scripts/demo.sh — set up, build, and run the main job: an end-to-end training run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja
cmake --build build --target tandem_cli
build/tools/tandem demo "$@"
