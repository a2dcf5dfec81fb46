#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every
# test. Tests that need a GPU (label gpu) or root (label netns) report as
# skipped, not passed, where they cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc 2>/dev/null || echo 2)" "$@"
