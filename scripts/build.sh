#!/usr/bin/env bash
# Configures and builds zpp into ./build (binaries in build/bin/).
# Extra arguments go to cmake's configure step, e.g. -DZPP_WITH_CUDA=OFF, and
# so do the words of ZPP_CMAKE_ARGS (how .ci/run turns on -DZPP_WERROR=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
# Ninja where setup-deps installed it: it compiles a target's objects while
# the libraries they link are still building, where Make waits (the ASan
# build: 5m22s against 6m53s on 2 cores). A build tree keeps the generator
# it was made with; CMake reads this only for a new one.
command -v ninja >/dev/null && export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
# shellcheck disable=SC2086  # ZPP_CMAKE_ARGS is a list of words
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo ${ZPP_CMAKE_ARGS:-} "$@"
cmake --build build -j"$jobs"
