#!/usr/bin/env bash
# Small all_reduce latency through zpp and through gloo, in one run, on
# loopback (one host, no root needed). Needs the torch environment of
# scripts/setup-torch.sh. Not a test; see docs/pytorch.md.
#   perf/torch-latency/torch-latency.sh [-b BUILD_DIR] [-- allreduce_latency.py args]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build
while (($#)); do
  case $1 in
    -b) build=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[[ -f $build/torch/env.sh ]] || { echo "run scripts/setup-torch.sh first (ZPP_BUILD_DIR=$build)" >&2; exit 1; }
ZPP_TORCH_SKIP=
# shellcheck source=/dev/null # written by scripts/setup-torch.sh
source "$build/torch/env.sh"
[[ -z $ZPP_TORCH_SKIP ]] || { echo "no torch: $ZPP_TORCH_SKIP" >&2; exit 77; }
# One compute thread per rank: more ranks than cores here.
exec env PYTHONPATH="$ZPP_TORCH_SITE" OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 \
  "$ZPP_TORCH_PYTHON" perf/torch-latency/allreduce_latency.py "$@"
