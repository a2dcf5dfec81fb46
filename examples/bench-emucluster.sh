#!/bin/sh
# zpp-train's benchmark (docs/trainer.md): on the emulated cluster of 2 nodes
# of 2 ranks with 1 Gbit/s links, plain and ZeRO++, each with and without
# overlap, in one run: the four runs take turns of 10 steps, so that all see
# the same machine. Needs root (network namespaces).
#
#   examples/bench-emucluster.sh [ZPP_TRAIN [OUT.json [STEPS]]]
set -eu
here=$(dirname "$0")
bin=${1:-build/bin/zpp-train}
out=${2:-trainer-bench.json}
steps=${3:-60}
# 4.06 million parameters (8.1 MB in bf16): the step's three collectives
# move about 36 MB across the two links in plain mode.
exec "$here/../perf/emucluster/emucluster.sh" -n 2 -l 2 -r 1gbit -- \
  "$bin" --compare-overlap --steps "$steps" --context 16 --embed 64 --hidden 1536 --batch 64 \
  -q --json "$out"
