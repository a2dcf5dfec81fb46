#!/usr/bin/env bash
# Configures and builds zpp into ./build (binaries in build/bin/).
# Extra arguments go to cmake's configure step, e.g. -DZPP_WITH_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build build -j"$jobs"
