#!/usr/bin/env bash
# emucluster.sh: an emulated ethernet cluster on one machine.
#
# N "nodes" are network namespaces, each joined by a veth pair to a bridge that
# lives in a namespace of its own (the "hub"), so nothing touches the host's
# network and parallel runs cannot collide. Each node's link is shaped with tc
# tbf in both directions (this kernel has tbf but no netem: rate, no delay).
# COMMAND runs once per rank inside its node's namespace with torchrun-style
# environment and ZPP_HOSTID=node<k>; with --mpi, mpirun starts the ranks
# environment and ZPP_HOSTID=node<k>; with --mpi, mpirun starts the ranks
# through perf/emucluster/netns-rsh. Everything is torn down on exit, failure or
# signal.
#
# This file is the main flow, top to bottom; its parts live beside it and are
# sourced (the installed copy carries them too): emucluster-args.sh (help,
# options), emucluster-cluster.sh (links, namespaces, build, --list/--cleanup,
# teardown), emucluster-host.sh (root, tools, kernel features, congestion
# control), emucluster-rate.sh (iperf3 check), emucluster-faults.sh
# (--link-down), emucluster-ranks.sh (launching, waiting, reporting).
#
# See docs/emulated-cluster.md and `emucluster.sh --help`.
set -euo pipefail

PROG=emucluster.sh
SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")

# Exit codes of the script itself (a failing rank's own code is passed on).
EX_SETUP=1      # could not build the cluster
EX_USAGE=2      # bad arguments
EX_RATE=3       # --strict-rate and a link missed its rate
EX_SKIP=77      # cannot run here (not root, no namespaces): "skipped" to ctest
EX_TIMEOUT=124  # --timeout expired

say() { [[ ${QUIET:-0} == 1 ]] || echo "emucluster: $*" >&2; }
warn() { echo "emucluster: warning: $*" >&2; }
die() { local code=$1; shift; echo "$PROG: error: $*" >&2; exit "$code"; }

# --- an MPI rank ----------------------------------------------------------------

# mpirun starts "$SELF --_mpi-rank -- COMMAND" as each rank; that rank runs
# mpi_rank_main and nothing else, before any other part sets a variable that
# could shadow the rank's environment.
# shellcheck source-path=SCRIPTDIR source=emucluster-ranks.sh
source "$HERE/emucluster-ranks.sh"
if [[ ${1:-} == --_mpi-rank ]]; then
  mpi_rank_main "$@"
fi

# --- the parts ------------------------------------------------------------------

# shellcheck source-path=SCRIPTDIR source=emucluster-cluster.sh
source "$HERE/emucluster-cluster.sh"
# shellcheck source-path=SCRIPTDIR source=emucluster-args.sh
source "$HERE/emucluster-args.sh"
# shellcheck source-path=SCRIPTDIR source=emucluster-host.sh
source "$HERE/emucluster-host.sh"
# shellcheck source-path=SCRIPTDIR source=emucluster-rate.sh
source "$HERE/emucluster-rate.sh"
# shellcheck source-path=SCRIPTDIR source=emucluster-faults.sh
source "$HERE/emucluster-faults.sh"

# --- arguments, maintenance, prerequisites --------------------------------------

parse_args "$@"
[[ $ACTION == run ]] || maintenance
if ((LOOPBACK == 0)) && [[ $(id -u) != 0 ]]; then
  not_root_message
  exit "$EX_SKIP"
fi
check_tools

# --- state and teardown ---------------------------------------------------------

MAIN_PID=$BASHPID
[[ -n $PREFIX ]] || PREFIX=zpp$$
WORKDIR=
CREATED_NS=()
HELPER_PIDS=()    # iperf3 server, link-down timers
declare -A RANK_OF_PID=()
RANK_PIDS=()
OUT_PIDS=()       # output prefixers
TORN_DOWN=0
STOPPING=0
TIMED_OUT=0
MASTER_ADDR=

trap teardown EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/emucluster.XXXXXX")

# --- main -----------------------------------------------------------------------

if ((LOOPBACK)); then
  MASTER_ADDR=127.0.0.1
  [[ -n $MASTER_PORT_ARG ]] || MASTER_PORT_ARG=$(free_port)
  ((CHECK_RATE == 0)) || say "--loopback: no links to shape or measure"
  ((${#LINK_DOWN[@]} == 0)) || die "$EX_USAGE" "--link-down needs the emulated links (not --loopback)"
  CHECK_RATE=0
else
  build_cluster
  MASTER_ADDR=$(node_ip 0)
  [[ -n $MASTER_PORT_ARG ]] || MASTER_PORT_ARG=29500
  print_cluster
  ((CHECK_RATE == 0)) || check_rates
fi
# zppCommInitFromEnv refuses a rendezvous without a secret: one per run
# unless the caller brought one.
[[ -n ${ZPP_SECRET:-} ]] || ZPP_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export ZPP_SECRET

if ((${#CMD[@]} == 0)); then
  exit 0
fi

((LOOPBACK)) || start_link_faults
START_TIME=$EPOCHREALTIME
say "starting $WORLD ranks: ${CMD[*]}"
if ((MPI)); then launch_mpi; else launch_plain; fi
FIRST_FAIL=
FIRST_CODE=0
wait_ranks
ELAPSED=$(awk -v a="$START_TIME" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
report_ranks
say "ranks ran for $ELAPSED s"
if ((TIMED_OUT)); then
  exit "$EX_TIMEOUT"
fi
if [[ -n $FIRST_FAIL ]]; then
  exit "$FIRST_CODE"
fi
exit 0
