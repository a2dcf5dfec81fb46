#!/usr/bin/env bash
# The README's main job. Until zpp-perf and the emulated cluster land, this is
# the codec benchmark: each codec beside a memcpy of the same bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/build.sh
mkdir -p results
./build/bin/zpp-bench-kernels --benchmark_out=results/bench-kernels.json --benchmark_out_format=json "$@"
echo "zpp main job: results in results/bench-kernels.json"
