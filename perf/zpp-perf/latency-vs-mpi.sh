#!/usr/bin/env bash
# Small-message latency of zpp's plain collectives against OpenMPI's on this
# machine: runs zpp-perf under mpirun several times (each run interleaves
# ours and MPI's iterations in rounds) and prints, per row, the median over
# the runs of ours/MPI (perf/zpp-perf/zpp-perf-compare.py). The target of the
# communicator issue is a latency within 1.2x of OpenMPI's: a median ratio
# of at least 0.833, which --min-ratio checks (exit 1 below it).
#
#   perf/zpp-perf/latency-vs-mpi.sh [-k RUNS] [-np RANKS] [--min-ratio R] [--out DIR] [-- ZPP-PERF ARGS]
#
# Defaults: 7 runs of 4 ranks, all-gather, all-reduce, reduce-scatter,
# all-to-all and broadcast of float from 64 B to 4 KiB, 2000 iterations in
# 10 rounds. The broadcast root rotates (-r rotate): back-to-back calls with
# one root measure how fast a root queues messages, not latency. More ranks
# than cores is allowed (--oversubscribe): each library then yields when idle.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
runs=7
np=4
min_ratio=""
out=""
# shellcheck disable=SC2054 # the commas belong to zpp-perf's -t list
perf_args=(-t allgather,allreduce,reducescatter,alltoall,broadcast -r rotate -d float -b 64 -e 4K -f 8
           -n 2000 -w 100 --rounds 10)

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -k) runs=$2; shift 2 ;;
    -np) np=$2; shift 2 ;;
    --min-ratio) min_ratio=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; perf_args=("$@"); break ;;
    *) echo "latency-vs-mpi.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "latency-vs-mpi.sh: -k wants a positive count, got '$runs'" >&2; exit 2; }
[[ $np =~ ^[1-9][0-9]*$ ]] || { echo "latency-vs-mpi.sh: -np wants a positive count, got '$np'" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "latency-vs-mpi.sh: mpirun not found (scripts/setup-deps.sh installs OpenMPI)" >&2; exit 2; }
perf="$root/build/bin/zpp-perf"
[[ -x $perf ]] || { echo "latency-vs-mpi.sh: $perf not built (bash scripts/build.sh)" >&2; exit 2; }

if [[ -z $out ]]; then
  out=$(mktemp -d /tmp/zpp-latency.XXXXXX)
fi
mkdir -p "$out"
mpi_env=()
if [[ $(id -u) -eq 0 ]]; then
  mpi_env=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
fi
files=()
for ((i = 1; i <= runs; i++)); do
  echo "latency-vs-mpi.sh: run $i of $runs ($np ranks)" >&2
  "${mpi_env[@]}" mpirun -np "$np" --oversubscribe --bind-to none \
    "$perf" -q --baseline mpi "${perf_args[@]}" -J "$out/run$i.json" >"$out/run$i.txt"
  files+=("$out/run$i.json")
done
compare=("$here/zpp-perf-compare.py" --json "$out/summary.json")
[[ -n $min_ratio ]] && compare+=(--min-ratio "$min_ratio")
echo "latency-vs-mpi.sh: runs and summary in $out" >&2
python3 "${compare[@]}" "${files[@]}"
