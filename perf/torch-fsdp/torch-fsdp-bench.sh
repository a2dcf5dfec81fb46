#!/usr/bin/env bash
# FSDP2 and DeepSpeed ZeRO-3 on the emulated cluster (2 nodes x 2 ranks,
# 1 Gbit/s links by default): step time with gloo, zpp plain and zpp ZeRO++,
# interleaved, and the bytes crossing nodes per step. Needs root (network
# namespaces) and the torch environment of scripts/setup-torch.sh; installs
# DeepSpeed into it if missing. Not a test; see docs/pytorch.md.
#   perf/torch-fsdp/torch-fsdp-bench.sh [-r RATE] [-n NODES] [-l RANKS_PER_NODE] [-- bench args]
# bench args: torch_fsdp_bench.py --help (--rounds, --steps, --frameworks fsdp2,deepspeed, --json)
set -euo pipefail
cd "$(dirname "$0")/../.."
rate=1gbit nodes=2 rpn=2
while (($#)); do
  case $1 in
    -r) rate=$2; shift 2 ;;
    -n) nodes=$2; shift 2 ;;
    -l) rpn=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[[ -f build/torch/env.sh ]] || { echo "run scripts/setup-torch.sh first" >&2; exit 1; }
ZPP_TORCH_SKIP=
# shellcheck source=/dev/null # written by scripts/setup-torch.sh
source build/torch/env.sh
[[ -z $ZPP_TORCH_SKIP ]] || { echo "no torch: $ZPP_TORCH_SKIP" >&2; exit 77; }
frameworks=fsdp2,deepspeed
for ((i = 1; i <= $#; i++)); do
  [[ ${!i} == --frameworks ]] && { j=$((i + 1)); frameworks=${!j:-}; }
  [[ ${!i} == --frameworks=* ]] && frameworks=${!i#--frameworks=}
done
if [[ ,$frameworks, == *,deepspeed,* ]]; then
  scripts/setup-torch-extras.sh "$ZPP_TORCH_PYTHON" deepspeed ||
    { echo "DeepSpeed is missing; install it, or pass -- --frameworks fsdp2" >&2; exit 1; }
fi
# gloo must use the node's (shaped) interface; one compute thread per rank.
# shellcheck disable=SC2016 # $EMUCLUSTER_IFACE is the rank's, expanded by its sh
exec perf/emucluster/emucluster.sh -n "$nodes" -l "$rpn" -r "$rate" -q -- env \
  PYTHONPATH="$ZPP_TORCH_SITE" OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 \
  sh -c 'GLOO_SOCKET_IFNAME=$EMUCLUSTER_IFACE exec "$0" "$@"' \
  "$ZPP_TORCH_PYTHON" perf/torch-fsdp/torch_fsdp_bench.py "$@"
