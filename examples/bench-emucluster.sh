#!/bin/sh
# zpp-train's benchmark (docs/trainer.md): on the emulated cluster of 2 nodes
# of 2 ranks with 1 Gbit/s links, ZeRO++ against plain in one run (the two
# runs take turns of 10 steps, so that both see the same machine), with
# overlap and then without. Needs root (network namespaces).
#
#   examples/bench-emucluster.sh [ZPP_TRAIN [OUTDIR [STEPS]]]
set -eu
here=$(dirname "$0")
bin=${1:-build/bin/zpp-train}
out=${2:-trainer-bench}
steps=${3:-60}
# 4.06 million parameters (8.1 MB in bf16): the step's three collectives
# move about 36 MB across the two links in plain mode.
model="--context 16 --embed 64 --hidden 1536 --batch 64"
mkdir -p "$out"
"$here/../perf/emucluster.sh" -n 2 -l 2 -r 1gbit --rate-json "$out/rates.json" -- \
  "$bin" --compare --steps "$steps" $model -q --json "$out/overlap.json"
"$here/../perf/emucluster.sh" -q -n 2 -l 2 -r 1gbit --no-check-rate -- \
  "$bin" --compare --steps "$steps" $model -q --no-overlap --json "$out/no-overlap.json"
