#!/usr/bin/env bash
# emucluster.sh: an emulated ethernet cluster on one machine.
#
# N "nodes" are network namespaces, each joined by a veth pair to a bridge that
# lives in a namespace of its own (the "hub"), so nothing touches the host's
# network and parallel runs cannot collide. Each node's link is shaped with tc
# tbf in both directions (this kernel has tbf but no netem: rate, no delay).
# COMMAND runs once per rank inside its node's namespace with torchrun-style
# environment and ZPP_HOSTID=node<k>; with --mpi, mpirun starts the ranks
# through perf/netns-rsh. Everything is torn down on exit, failure or signal.
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

usage() {
  cat <<EOF
Usage: $PROG [options] [-- COMMAND [ARGS...]]
       $PROG --list | --cleanup [--prefix NAME]

Builds N emulated nodes (network namespaces on a bridge, links shaped with tc
tbf), checks each link's rate with iperf3, runs COMMAND once per rank inside
its node, and tears everything down. Needs root; see --loopback otherwise.
Without COMMAND it only builds, measures and tears down.

Cluster:
  -n, --nodes N           nodes (default 2)
  -l, --ranks-per-node L  ranks per node (default 1)
      --placement P       which ranks a node holds: blocks (node k: ranks
                          kL..kL+L-1, the default) or cyclic (nodes taken in
                          turn: rank r on node r % N, as mpirun --map-by node
                          or a Slurm cyclic distribution place them)
  -r, --rate RATE         every node's link rate, both directions (default
                          1gbit); bits per second: 200mbit, 1gbit, 1.5g, or
                          'none' for an unshaped link
      --node-rate K=RATE  node K's link at RATE instead (repeatable), e.g. a
                          slow node: --node-rate 2=200mbit
      --tbf-burst BYTES   bytes a link may send back to back (default: 2 ms of
                          its rate, at least 32k), e.g. 16k
      --tbf-latency T     the switch port's queue (the hub's side of each
                          link), as the longest a packet may wait in it
                          (default 5ms); shallow switch buffers: e.g. 1ms
      --host-queue P      the node's own queue in front of its link, in
                          packets (default 1000, a NIC's txqueuelen), or
                          'switch': as deep as the switch port's (--tbf-latency)
      --tcp-cc NAME       TCP congestion control in the nodes (default cubic,
                          Linux's default; 'host': the host's, e.g. bbr)
      --subnet A.B.C      the /24 the nodes live in (default 10.213.0); node k
                          is A.B.C.(k+1), the hub A.B.C.254. Private to the run.
      --prefix NAME       namespace name prefix (default zpp<pid>)
Rate check (before COMMAND):
      --no-check-rate     skip the iperf3 measurement
      --rate-json FILE    write the measurement as JSON
      --rate-seconds S    length of one iperf3 run (default 1)
      --rate-tries T      runs per direction at most; the best counts and
                          a run within tolerance stops early (default 2)
      --rate-tolerance P  percent a measured rate may miss the asked one
                          and still count as ok (default 10)
      --strict-rate       a link off its rate is an error (exit $EX_RATE)
Running:
      --mpi               start the ranks with mpirun across the nodes
      --mpi-args "ARGS"   extra mpirun arguments (word-split)
      --loopback          no namespaces, no shaping, no root: ranks run on
                          this machine with the same environment
      --master-port P     MASTER_PORT (default 29500: node 0's namespace is
                          fresh, so any port is free there; --loopback picks
                          a free one)
      --timeout S         stop all ranks after S seconds (exit $EX_TIMEOUT)
      --no-fail-fast      when a rank fails, let the others finish
      --grace S           seconds between SIGTERM and SIGKILL (default 3)
      --link-down K@S[+D] take node K's link down S seconds after the ranks
                          start (for D seconds, then up again); repeatable
      --log-dir DIR       each rank's output to DIR/rank<R>.log
      --no-prefix         rank output unprefixed (default "[r<R> node<K>] ")
      --keep              leave the cluster up at exit (clean with --cleanup)
  -q, --quiet             fewer messages from this script
Maintenance:
      --list              list emulated clusters and whether their owner lives
      --cleanup           remove clusters whose owner died (or, with
                          --prefix, that one cluster)
  -h, --help

Each rank gets: ZPP_HOSTID=node<k> RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE
GROUP_RANK NODE_RANK MASTER_ADDR MASTER_PORT, and EMUCLUSTER_NODE,
EMUCLUSTER_NS, EMUCLUSTER_IFACE (the node's interface), EMUCLUSTER_SUBNET.
Exit: 0 all ranks ok; else the first failing rank's code; $EX_TIMEOUT timeout;
130/143 interrupted; $EX_SETUP setup failed; $EX_USAGE usage; $EX_RATE strict rate;
$EX_SKIP cannot run here (not root, no network namespaces).
EOF
}

# --- rates ------------------------------------------------------------------

# Rates are bits per second only: tc reads "mbps" as megaBYTES, a classic
# factor-8 mistake, so byte units are refused rather than guessed.
parse_rate() {
  local s=${1,,}
  if [[ $s == none ]]; then
    echo 0
    return
  fi
  if [[ ! $s =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit|k|m|g|t)$ ]]; then
    return 1
  fi
  local num=${BASH_REMATCH[1]} unit=${BASH_REMATCH[3]} mult
  case ${unit:0:1} in
    b) mult=1 ;;
    k) mult=1000 ;;
    m) mult=1000000 ;;
    g) mult=1000000000 ;;
    t) mult=1000000000000 ;;
  esac
  awk -v n="$num" -v m="$mult" 'BEGIN { v = n * m; if (v < 8000) exit 1; printf "%.0f\n", v }'
}

fmt_rate() { # bits/s -> "957.1 Mbit/s"
  awk -v b="$1" 'BEGIN {
    if (b >= 1e9) printf "%.2f Gbit/s", b / 1e9;
    else if (b >= 1e6) printf "%.1f Mbit/s", b / 1e6;
    else printf "%.1f kbit/s", b / 1e3 }'
}

# tbf sends at most `burst` bytes back to back. Too small and TCP cannot fill
# the link (measured: 16 KB at 1 Gbit/s gives 88% both ways at once, 256 KB
# gives 96%); ~2 ms worth of the rate, never below 32 KB, keeps TCP at the
# goodput ceiling from 10 Mbit/s to 10 Gbit/s.
tbf_burst() {
  awk -v b="$1" 'BEGIN { v = b / 8 * 0.002; if (v < 32768) v = 32768; printf "%.0f\n", v }'
}
# The switch port's queue (the hub's side): 5 ms at the link rate. Long
# enough that TCP's bursts are not dropped, short enough that no one mistakes
# it for latency. --tbf-latency changes it, --tbf-burst both sides' bucket, to
# emulate other switches.
TBF_LATENCY=5ms
TBF_BURST=
# The node's side stands for the host's NIC queue, which is deep (txqueuelen
# 1000 packets) and which the host's own TCP is held back by (TCP Small
# Queues) rather than dropped in. With 5 ms there as well, an all-to-all's
# three flows out of one node lost 8.5% of their packets in their own
# sender's queue (tc -s: 5820 of 68442 at 200 Mbit/s), and ran at 0.83-0.90
# of the wire, varying from run to run; a host never drops that much.
HOST_QUEUE_PKTS=1000
HOST_PKT_BYTES=1514
# TCP congestion control inside the nodes. A new namespace inherits the
# host's default, and that default decides results: this VM's is bbr, under
# which a call that followed long transfers stalled 100-200 ms at a time
# (qwZ 64 MiB after 256 MiB all-gathers on 4x1 at 1 Gbit/s: one call in
# three at 320-410 ms, 19 runs of 19); with cubic, none did (18 runs).
# cubic, Linux's own default, unless --tcp-cc says otherwise ('host': keep
# the host's).
TCP_CC=cubic

# --- names ------------------------------------------------------------------

# Namespace names: <prefix>-hub and <prefix>-n<k>. Interface names live inside
# those namespaces, so they are short and fixed (Linux allows 15 characters):
# the node side is veth0, its hub side node<k>, the bridge br0.
NODE_IF=veth0
ns_node() { echo "$PREFIX-n$1"; }
ns_hub() { echo "$PREFIX-hub"; }
node_ip() { echo "$SUBNET.$(($1 + 1))"; }
HUB_HOST=254

# Clusters on this machine, one line per prefix: "prefix owner_pid alive|dead".
# The owner is the pid in a default prefix (zpp<pid>); a custom prefix has no
# owner we can check, so it counts as alive unless named with --prefix.
list_clusters() {
  local ns prefix
  ip netns list 2>/dev/null | awk '{print $1}' | while read -r ns; do
    [[ $ns =~ ^(zpp[0-9]+)-(hub|n[0-9]+)$ ]] || continue
    echo "${BASH_REMATCH[1]}"
  done | sort -u | while read -r prefix; do
    local pid=${prefix#zpp} state=dead
    if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' </proc/"$pid"/cmdline | grep -q emucluster; then
      state=alive
    fi
    echo "$prefix $pid $state"
  done
}

cluster_namespaces() { # prefix -> its namespaces, nodes first, hub last
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1-n[0-9]+$" || true
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1-hub$" || true
}

# Processes inside a namespace keep it (and its veth) alive after `ip netns
# del`, so everything still running in there is stopped first.
kill_ns_pids() {
  local ns=$1 pids p
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [[ -n $pids ]] || return 0
  for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
  local i
  for ((i = 0; i < 20; i++)); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] || return 0
    sleep 0.1
  done
  for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
}

remove_cluster() { # prefix
  local ns
  for ns in $(cluster_namespaces "$1"); do
    kill_ns_pids "$ns"
    ip netns del "$ns" 2>/dev/null || warn "could not delete namespace $ns"
  done
}

# --- the MPI rank wrapper -----------------------------------------------------

# mpirun starts "$SELF --_mpi-rank -- COMMAND" as each rank: it turns OpenMPI's
# rank variables into the same environment the plain launcher gives, and finds
# its node from the namespace it was started in (so a wrong placement shows up
# as a wrong ZPP_HOSTID, not as silently right-looking numbers).
mpi_rank_main() {
  shift # --_mpi-rank
  [[ ${1:-} == -- ]] && shift
  local k ns
  ns=$(ip netns identify "$$" 2>/dev/null || true)
  if [[ $ns =~ -n([0-9]+)$ ]]; then
    k=${BASH_REMATCH[1]}
  elif [[ ${EMUCLUSTER_PLACEMENT:-blocks} == cyclic ]]; then # --loopback, nodes in turn
    k=$((OMPI_COMM_WORLD_RANK % ${EMUCLUSTER_NODES:-1}))
  else # --loopback: nodes are consecutive blocks of ranks
    k=$((OMPI_COMM_WORLD_RANK / ${EMUCLUSTER_RANKS_PER_NODE:-1}))
  fi
  export ZPP_HOSTID=node$k EMUCLUSTER_NODE=$k GROUP_RANK=$k NODE_RANK=$k
  export RANK=$OMPI_COMM_WORLD_RANK WORLD_SIZE=$OMPI_COMM_WORLD_SIZE
  export LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK LOCAL_WORLD_SIZE=$OMPI_COMM_WORLD_LOCAL_SIZE
  [[ -n $ns ]] && export EMUCLUSTER_NS=$ns
  if [[ -n ${EMUCLUSTER_LOG_DIR:-} ]]; then
    exec >"$EMUCLUSTER_LOG_DIR/rank$RANK.log" 2>&1
  fi
  exec "$@"
}

if [[ ${1:-} == --_mpi-rank ]]; then
  mpi_rank_main "$@"
fi

# --- arguments ------------------------------------------------------------------

NODES=2
RPN=1
PLACEMENT=blocks
RATE_ARG=1gbit
declare -A NODE_RATE_ARG=()
SUBNET=10.213.0
PREFIX=
CHECK_RATE=1
RATE_JSON=
RATE_SECONDS=1
RATE_TRIES=2
RATE_TOL=10
STRICT_RATE=0
MPI=0
MPI_ARGS=
LOOPBACK=0
MASTER_PORT_ARG=
TIMEOUT=
FAIL_FAST=1
GRACE=3
LINK_DOWN=()
LOG_DIR=
PREFIX_OUT=1
KEEP=0
QUIET=0
ACTION=run
CMD=()

need_arg() { [[ $# -ge 2 ]] || die $EX_USAGE "$1 needs a value (see --help)"; }
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
is_num() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }

while [[ $# -gt 0 ]]; do
  case $1 in
    -n | --nodes) need_arg "$@"; NODES=$2; shift 2 ;;
    -l | --ranks-per-node) need_arg "$@"; RPN=$2; shift 2 ;;
    --placement) need_arg "$@"; PLACEMENT=$2; shift 2 ;;
    -r | --rate) need_arg "$@"; RATE_ARG=$2; shift 2 ;;
    --node-rate)
      need_arg "$@"
      [[ $2 =~ ^([0-9]+)=(.+)$ ]] || die $EX_USAGE "--node-rate wants K=RATE, e.g. 2=200mbit (got '$2')"
      NODE_RATE_ARG[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
      shift 2 ;;
    --subnet) need_arg "$@"; SUBNET=$2; shift 2 ;;
    --tbf-burst) need_arg "$@"; TBF_BURST=$2; shift 2 ;;
    --tbf-latency) need_arg "$@"; TBF_LATENCY=$2; shift 2 ;;
    --host-queue) need_arg "$@"; HOST_QUEUE_PKTS=$2; shift 2 ;;
    --tcp-cc) need_arg "$@"; TCP_CC=$2; shift 2 ;;
    --prefix) need_arg "$@"; PREFIX=$2; shift 2 ;;
    --check-rate) CHECK_RATE=1; shift ;;
    --no-check-rate) CHECK_RATE=0; shift ;;
    --rate-json) need_arg "$@"; RATE_JSON=$2; shift 2 ;;
    --rate-seconds) need_arg "$@"; RATE_SECONDS=$2; shift 2 ;;
    --rate-tries) need_arg "$@"; RATE_TRIES=$2; shift 2 ;;
    --rate-tolerance) need_arg "$@"; RATE_TOL=$2; shift 2 ;;
    --strict-rate) STRICT_RATE=1; shift ;;
    --mpi) MPI=1; shift ;;
    --mpi-args) need_arg "$@"; MPI_ARGS=$2; shift 2 ;;
    --loopback) LOOPBACK=1; shift ;;
    --master-port) need_arg "$@"; MASTER_PORT_ARG=$2; shift 2 ;;
    --timeout) need_arg "$@"; TIMEOUT=$2; shift 2 ;;
    --no-fail-fast) FAIL_FAST=0; shift ;;
    --grace) need_arg "$@"; GRACE=$2; shift 2 ;;
    --link-down) need_arg "$@"; LINK_DOWN+=("$2"); shift 2 ;;
    --log-dir) need_arg "$@"; LOG_DIR=$2; shift 2 ;;
    --no-prefix) PREFIX_OUT=0; shift ;;
    --keep) KEEP=1; shift ;;
    -q | --quiet) QUIET=1; shift ;;
    --list) ACTION=list; shift ;;
    --cleanup) ACTION=cleanup; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; CMD=("$@"); break ;;
    -*) die $EX_USAGE "unknown option '$1' (see --help)" ;;
    *) CMD=("$@"); break ;;
  esac
done

is_uint "$NODES" && ((NODES >= 1 && NODES <= 200)) || die $EX_USAGE "-n wants 1..200 nodes (got '$NODES')"
is_uint "$RPN" && ((RPN >= 1 && RPN <= 64)) || die $EX_USAGE "-l wants 1..64 ranks per node (got '$RPN')"
[[ -z $TBF_BURST || $TBF_BURST =~ ^[0-9]+[kKmM]?b?$ ]] ||
  die $EX_USAGE "--tbf-burst wants bytes, e.g. 64k (got '$TBF_BURST')"
[[ $TBF_LATENCY =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] ||
  die $EX_USAGE "--tbf-latency wants a time, e.g. 1ms (got '$TBF_LATENCY')"
[[ $HOST_QUEUE_PKTS == switch ]] || { is_uint "$HOST_QUEUE_PKTS" && ((HOST_QUEUE_PKTS >= 1 && HOST_QUEUE_PKTS <= 100000)); } ||
  die $EX_USAGE "--host-queue wants 1..100000 packets or 'switch' (got '$HOST_QUEUE_PKTS')"
[[ $PLACEMENT == blocks || $PLACEMENT == cyclic ]] ||
  die $EX_USAGE "--placement wants blocks or cyclic (got '$PLACEMENT')"
[[ $SUBNET =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] &&
  ((BASH_REMATCH[1] < 256 && BASH_REMATCH[2] < 256 && BASH_REMATCH[3] < 256)) ||
  die $EX_USAGE "--subnet wants the first three octets of a /24, e.g. 10.213.0 (got '$SUBNET')"
[[ -z $MASTER_PORT_ARG ]] || { is_uint "$MASTER_PORT_ARG" && ((MASTER_PORT_ARG > 0 && MASTER_PORT_ARG < 65536)); } ||
  die $EX_USAGE "--master-port wants a TCP port (got '$MASTER_PORT_ARG')"
is_num "$RATE_SECONDS" && is_uint "$RATE_TRIES" && ((RATE_TRIES >= 1)) && is_num "$RATE_TOL" ||
  die $EX_USAGE "--rate-seconds, --rate-tries, --rate-tolerance want positive numbers"
[[ -z $TIMEOUT ]] || is_num "$TIMEOUT" || die $EX_USAGE "--timeout wants seconds (got '$TIMEOUT')"
is_num "$GRACE" || die $EX_USAGE "--grace wants seconds (got '$GRACE')"
if [[ -n $PREFIX ]]; then
  # The prefix names namespaces and hostnames; keep it to safe characters.
  [[ $PREFIX =~ ^[A-Za-z0-9_.]{1,32}$ ]] || die $EX_USAGE "--prefix wants 1-32 of [A-Za-z0-9_.] (got '$PREFIX')"
fi

RATE_BPS=$(parse_rate "$RATE_ARG") || die $EX_USAGE "bad rate '$RATE_ARG': use bits per second, e.g. 200mbit, 1gbit, 1.5g, or none"
declare -a NODE_BPS=()
for ((k = 0; k < NODES; k++)); do NODE_BPS[k]=$RATE_BPS; done
for k in "${!NODE_RATE_ARG[@]}"; do
  ((k < NODES)) || die $EX_USAGE "--node-rate names node $k, but there are only $NODES nodes (0..$((NODES - 1)))"
  NODE_BPS[k]=$(parse_rate "${NODE_RATE_ARG[$k]}") ||
    die $EX_USAGE "bad rate '${NODE_RATE_ARG[$k]}' for node $k: use bits per second, e.g. 200mbit"
done

declare -a LD_NODE=() LD_AT=() LD_FOR=()
for spec in "${LINK_DOWN[@]}"; do
  [[ $spec =~ ^([0-9]+)@([0-9]+(\.[0-9]+)?)(\+([0-9]+(\.[0-9]+)?))?$ ]] ||
    die $EX_USAGE "--link-down wants NODE@SECONDS[+DURATION], e.g. 1@5 or 1@5+3 (got '$spec')"
  ((BASH_REMATCH[1] < NODES)) || die $EX_USAGE "--link-down names node ${BASH_REMATCH[1]}, but there are only $NODES nodes"
  LD_NODE+=("${BASH_REMATCH[1]}")
  LD_AT+=("${BASH_REMATCH[2]}")
  LD_FOR+=("${BASH_REMATCH[5]}")
done

if [[ -n $LOG_DIR ]]; then
  mkdir -p "$LOG_DIR" || die $EX_USAGE "cannot create --log-dir '$LOG_DIR'"
  LOG_DIR=$(readlink -f "$LOG_DIR")
fi
if [[ -n $RATE_JSON ]]; then
  # Fail now rather than after the measurement; an old file is replaced then.
  [[ -w $(dirname "$RATE_JSON") ]] || die $EX_USAGE "cannot write --rate-json '$RATE_JSON' (directory not writable)"
  rm -f "$RATE_JSON"
fi

WORLD=$((NODES * RPN))

# --- without root ---------------------------------------------------------------------

cmd_string() {
  local s="" a
  for a in "$@"; do s+=" $(printf '%q' "$a")"; done
  echo "${s# }"
}

not_root_message() {
  local cmd="${CMD[*]:+ -- $(cmd_string "${CMD[@]}")}"
  cat >&2 <<EOF
$PROG: needs root: network namespaces, veth links and tc shaping need
CAP_NET_ADMIN, and you are uid $(id -u). Nothing was set up.

  As root:          sudo $0 -n $NODES -l $RPN -r $RATE_ARG$cmd

  Without root, the same $WORLD ranks can run on this machine, unshaped, each
  with ZPP_HOSTID=node<k> so that one machine plays $NODES nodes:

                    $0 --loopback -n $NODES -l $RPN$cmd

  (zpp-perf and zpp-health fork local ranks themselves with -N $WORLD.)
EOF
}

# --- maintenance subcommands ---------------------------------------------------------------

if [[ $ACTION == list || $ACTION == cleanup ]]; then
  [[ $(id -u) == 0 ]] || { echo "$PROG: --$ACTION needs root (network namespaces)" >&2; exit $EX_SKIP; }
  if [[ $ACTION == list ]]; then
    found=0
    while read -r p pid state; do
      found=1
      echo "$p owner=$pid $state namespaces: $(cluster_namespaces "$p" | tr '\n' ' ')"
    done < <(list_clusters)
    ((found)) || echo "no emulated clusters"
    exit 0
  fi
  if [[ -n $PREFIX ]]; then
    [[ -n $(cluster_namespaces "$PREFIX") ]] || { echo "no cluster with prefix $PREFIX"; exit 0; }
    remove_cluster "$PREFIX"
    echo "removed $PREFIX"
    exit 0
  fi
  removed=0
  while read -r p pid state; do
    if [[ $state == dead ]]; then
      remove_cluster "$p"
      echo "removed $p (owner $pid is gone)"
      removed=$((removed + 1))
    else
      echo "kept $p (owner $pid is running)"
    fi
  done < <(list_clusters)
  ((removed)) || echo "nothing to clean"
  exit 0
fi

# --- prerequisites ------------------------------------------------------------------------

if ((LOOPBACK == 0)) && [[ $(id -u) != 0 ]]; then
  not_root_message
  exit $EX_SKIP
fi

missing=()
for tool in setsid awk; do command -v $tool >/dev/null || missing+=("$tool (util-linux/gawk)"); done
if ((LOOPBACK == 0)); then
  command -v ip >/dev/null || missing+=("ip (Debian: iproute2)")
  command -v tc >/dev/null || missing+=("tc (Debian: iproute2)")
  command -v unshare >/dev/null || missing+=("unshare (Debian: util-linux)")
  [[ $TCP_CC == host ]] || command -v flock >/dev/null || missing+=("flock (Debian: util-linux)")
  ((CHECK_RATE == 0)) || command -v iperf3 >/dev/null || missing+=("iperf3 (Debian: iperf3; or --no-check-rate)")
fi
((MPI == 0)) || command -v mpirun >/dev/null || missing+=("mpirun (Debian: openmpi-bin)")
for tool in "${missing[@]}"; do echo "$PROG: error: missing tool: $tool" >&2; done
((${#missing[@]} == 0)) || die $EX_SETUP "${#missing[@]} tools missing (above)"

# --- what the host must offer ---------------------------------------------------------------------

# Kernel features probed up front, and the congestion control the nodes
# choose (a host-wide list gates it), in their own file.
# shellcheck source-path=SCRIPTDIR source=emucluster-host.sh
source "$HERE/emucluster-host.sh"

# --- state and teardown ------------------------------------------------------------------------

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

# A sleep without a child process: read with a timeout on a pipe that never
# delivers. Only for the timer subshells, which have no traps: bash 5.2
# crashes (SIGSEGV) when a trap exits the shell while `read -t` waits, so the
# main shell sleeps with sleep(1).
exec {TICK_FD}<> <(:)
tick() { read -rt "${1:-0.1}" -u "$TICK_FD" || true; }

# Background commands of a non-interactive shell start with SIGINT and
# SIGQUIT ignored; ranks should see the defaults, as under any launcher.
DEFSIG=()
# shellcheck disable=SC2054 # the comma belongs to env's option
if env --default-signal=INT,QUIT true 2>/dev/null; then DEFSIG=(--default-signal=INT,QUIT); fi

stop_ranks() { # signal every rank's process group; KILL what outlives the grace
  local p alive i
  for p in "${RANK_PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true; done
  local steps
  steps=$(awk -v g="$GRACE" 'BEGIN { printf "%d", g * 10 }')
  for ((i = 0; i < steps; i++)); do
    alive=0
    for p in "${RANK_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  for p in "${RANK_PIDS[@]}"; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true; done
}

teardown() {
  local rc=$?
  # Subshells (timers) must never tear down the cluster they serve.
  [[ $BASHPID == "$MAIN_PID" ]] || return 0
  ((TORN_DOWN == 0)) || return 0
  TORN_DOWN=1
  # A second Ctrl-C must not interrupt the cleanup halfway.
  trap '' INT TERM
  set +e
  local p ns
  restore_allowed_cc
  for p in "${HELPER_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  ((${#RANK_PIDS[@]} == 0)) || stop_ranks
  if ((KEEP)) && ((${#CREATED_NS[@]})); then
    echo "emucluster: --keep: left $PREFIX up (${CREATED_NS[*]}); remove with: $SELF --cleanup --prefix $PREFIX" >&2
  else
    # A signal between `ip netns add` and the bookkeeping after it would
    # leak a namespace, so once our hub exists (the prefix is then ours) every
    # namespace with our prefix goes. Nodes first, the hub last.
    local all=("${CREATED_NS[@]}")
    ((${#CREATED_NS[@]} == 0)) || mapfile -t all < <(cluster_namespaces "$PREFIX")
    for ns in "${all[@]}"; do
      kill_ns_pids "$ns"
      ip netns del "$ns" 2>/dev/null || warn "could not delete namespace $ns"
    done
    if ((${#CREATED_NS[@]})); then
      local left
      left=$(cluster_namespaces "$PREFIX")
      if [[ -n $left ]]; then
        warn "namespaces left behind: $left"
      else
        say "torn down ($PREFIX)"
      fi
    fi
  fi
  # Let the prefixers flush the last lines of output (bounded: a rank's
  # orphaned child could hold the pipe open forever).
  local i
  for ((i = 0; i < 20; i++)); do
    local alive=0
    for p in "${OUT_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.05
  done
  for p in "${OUT_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  [[ -z $WORKDIR ]] || rm -rf "$WORKDIR"
  exit "$rc"
}

on_signal() {
  local sig=$1 code=$2 p running=()
  trap '' INT TERM
  # Tell which ranks were still running when the user stopped the run: a
  # hang is then visible as the rank that never finished.
  for p in "${RANK_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && running+=("${RANK_OF_PID[$p]}"); done
  if ((${#running[@]})); then
    echo "emucluster: caught SIG$sig; still running: rank ${running[*]}; stopping them and tearing down" >&2
  else
    echo "emucluster: caught SIG$sig, tearing down" >&2
  fi
  exit "$code"
}

trap teardown EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/emucluster.XXXXXX")

# --- building the cluster ---------------------------------------------------------------------------

add_ns() {
  local ns=$1 err
  if ! err=$(ip netns add "$ns" 2>&1); then
    if [[ -e /run/netns/$ns ]]; then
      die $EX_SETUP "namespace $ns already exists (a crashed run? see: $PROG --list / --cleanup)"
    fi
    ((${#CREATED_NS[@]} == 0)) || die $EX_SETUP "ip netns add $ns failed: $err"
    # Root without CAP_SYS_ADMIN/NET_ADMIN (an unprivileged container) cannot
    # emulate anything: that is "cannot run here", not a failure.
    echo "$PROG: cannot create network namespaces here: $err" >&2
    echo "$PROG: run it on a machine (or privileged container) where 'ip netns add' works, or use --loopback" >&2
    exit $EX_SKIP
  fi
  CREATED_NS+=("$ns")
}

shape() { # ns dev bps side(host|switch)
  local ns=$1 dev=$2 bps=$3 side=$4 burst queue
  ((bps > 0)) || return 0
  burst=${TBF_BURST:-$(tbf_burst "$bps")}
  queue=(latency "$TBF_LATENCY")
  [[ $side == switch || $HOST_QUEUE_PKTS == switch ]] ||
    queue=(limit $((HOST_QUEUE_PKTS * HOST_PKT_BYTES)))
  tc -n "$ns" qdisc replace dev "$dev" root tbf rate "${bps}bit" burst "$burst" "${queue[@]}" ||
    die $EX_SETUP "tc could not shape $dev in $ns to $(fmt_rate "$bps")"
}

build_cluster() {
  local hub k ns
  hub=$(ns_hub)
  add_ns "$hub"
  check_host "$hub"
  ip -n "$hub" link set lo up
  # forward_delay 0: ports forward at once instead of after 15 s of "learning".
  ip -n "$hub" link add br0 type bridge forward_delay 0 || die $EX_SETUP "cannot create the bridge (kernel without bridge support?)"
  ip -n "$hub" addr add "$SUBNET.$HUB_HOST/24" dev br0
  ip -n "$hub" link set br0 up
  for ((k = 0; k < NODES; k++)); do
    ns=$(ns_node "$k")
    add_ns "$ns"
    # Both ends are created directly inside their namespaces: no interface
    # ever appears in the host's namespace, even for a moment.
    ip link add "$NODE_IF" netns "$ns" type veth peer name "node$k" netns "$hub" ||
      die $EX_SETUP "cannot create the veth pair for node $k"
    ip -n "$hub" link set "node$k" master br0
    ip -n "$hub" link set "node$k" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$(node_ip "$k")/24" dev "$NODE_IF"
    ip -n "$ns" link set "$NODE_IF" up
    # Egress of the node side shapes what the node sends, egress of the hub
    # side what it receives: a full-duplex link of that rate.
    shape "$ns" "$NODE_IF" "${NODE_BPS[k]}" host
    shape "$hub" "node$k" "${NODE_BPS[k]}" switch
  done
  set_nodes_tcp_cc
}

print_cluster() {
  ((QUIET == 0)) || return 0
  local k
  local cc=$TCP_CC
  [[ $cc != host ]] || cc="$(cat /proc/sys/net/ipv4/tcp_congestion_control) (the host's)"
  say "$NODES nodes x $RPN ranks ($PLACEMENT), prefix $PREFIX, subnet $SUBNET.0/24, hub $SUBNET.$HUB_HOST, tcp $cc"
  for ((k = 0; k < NODES; k++)); do
    local r="unshaped"
    ((NODE_BPS[k] == 0)) || r=$(fmt_rate "${NODE_BPS[k]}")
    printf 'emucluster:   node%-3s %-14s %-15s link %s\n' "$k" "$(ns_node "$k")" "$(node_ip "$k")" "$r" >&2
  done
}

# --- the rate check --------------------------------------------------------------------------------

# iperf3 between each node and the hub, in its own file to keep this one
# readable; it uses this script's variables and helpers.
# shellcheck source-path=SCRIPTDIR source=emucluster-rate.sh
source "$HERE/emucluster-rate.sh"

# --- link faults --------------------------------------------------------------------------------------

# Pulling the cable: the hub side goes down, so the node's veth loses carrier
# and nothing passes either way. TCP connections are not reset, they stall,
# just as they do when a real link dies.
start_link_faults() {
  local i hub
  hub=$(ns_hub)
  for i in "${!LD_NODE[@]}"; do
    (
      trap - EXIT INT TERM
      k=${LD_NODE[i]}
      tick "${LD_AT[i]}"
      ip -n "$hub" link set "node$k" down && echo "emucluster: link of node$k DOWN at +${LD_AT[i]} s" >&2
      if [[ -n ${LD_FOR[i]} ]]; then
        tick "${LD_FOR[i]}"
        ip -n "$hub" link set "node$k" up && echo "emucluster: link of node$k UP again at +${LD_AT[i]}+${LD_FOR[i]} s" >&2
      fi
    ) &
    HELPER_PIDS+=("$!")
  done
}

# --- running the ranks ------------------------------------------------------------------------------

# Output of one rank goes through a prefixer whose pid we keep, so the last
# lines can be flushed before the summary.
open_prefixer() { # tag fd-var target(1|2)
  local tag=$1 target=$3
  if ((target == 1)); then
    exec {fd}> >(trap '' INT TERM; awk -v p="$tag" '{ print p $0; fflush() }')
  else
    exec {fd}> >(trap '' INT TERM; awk -v p="$tag" '{ print p $0; fflush() }' >&2)
  fi
  OUT_PIDS+=("$!")
  printf -v "$2" '%s' "$fd"
}

# The rank of local rank l on node k (--placement).
rank_of() {
  if [[ $PLACEMENT == cyclic ]]; then echo $(($2 * NODES + $1)); else echo $(($1 * RPN + $2)); fi
}
# The node of rank r.
node_of() {
  if [[ $PLACEMENT == cyclic ]]; then echo $(($1 % NODES)); else echo $(($1 / RPN)); fi
}

MASTER_ADDR=
launch_plain() {
  local k l r ns envs o e
  for ((k = 0; k < NODES; k++)); do
    for ((l = 0; l < RPN; l++)); do
      r=$(rank_of "$k" "$l")
      ns=$(ns_node "$k")
      envs=(ZPP_HOSTID="node$k" RANK="$r" WORLD_SIZE="$WORLD" LOCAL_RANK="$l" LOCAL_WORLD_SIZE="$RPN"
        GROUP_RANK="$k" NODE_RANK="$k" MASTER_ADDR="$MASTER_ADDR" MASTER_PORT="$MASTER_PORT_ARG"
        EMUCLUSTER_NODE="$k" EMUCLUSTER_SUBNET="$SUBNET.0/24")
      local launcher=()
      if ((LOOPBACK)); then
        launcher=(setsid env "${DEFSIG[@]}" "${envs[@]}")
      else
        envs+=(EMUCLUSTER_NS="$ns" EMUCLUSTER_IFACE="$NODE_IF")
        # The node's own hostname (in a private UTS namespace, the host's is
        # untouched) so that code keyed on gethostname sees distinct nodes.
        launcher=(setsid ip netns exec "$ns" unshare --uts -- env "${DEFSIG[@]}" "${envs[@]}"
          sh -c 'hostname "$0" && exec "$@"' "$ns")
      fi
      if [[ -n $LOG_DIR ]]; then
        "${launcher[@]}" "${CMD[@]}" </dev/null >"$LOG_DIR/rank$r.log" 2>&1 &
      elif ((PREFIX_OUT)); then
        open_prefixer "[r$r node$k] " o 1
        open_prefixer "[r$r node$k] " e 2
        "${launcher[@]}" "${CMD[@]}" </dev/null 1>&"$o" 2>&"$e" &
        local pid=$!
        exec {o}>&- {e}>&-
        RANK_PIDS+=("$pid")
        RANK_OF_PID[$pid]=$r
        continue
      else
        "${launcher[@]}" "${CMD[@]}" </dev/null &
      fi
      RANK_PIDS+=("$!")
      RANK_OF_PID[$!]=$r
    done
  done
}

launch_mpi() {
  local hf=$WORKDIR/hostfile k
  local mapBy=slot
  [[ $PLACEMENT == blocks ]] || mapBy=node
  local args=(mpirun -np "$WORLD" --bind-to none --oversubscribe --map-by "$mapBy")
  [[ $(id -u) != 0 ]] || args+=(--allow-run-as-root)
  # ob1 over TCP and shared memory only: the UCX PML would find System V shared
  # memory across the namespaces and bypass the shaped links. Shared memory
  # (vader) is only ever used between ranks of one OpenMPI node, i.e. inside
  # one namespace, because OpenMPI decides locality per daemon.
  # shellcheck disable=SC2054 # commas inside MCA values
  args+=(--mca pml ob1 --mca btl self,vader,tcp --mca osc '^ucx')
  args+=(-x MASTER_ADDR -x MASTER_PORT -x ZPP_SECRET -x EMUCLUSTER_SUBNET -x EMUCLUSTER_RANKS_PER_NODE)
  args+=(-x EMUCLUSTER_PLACEMENT -x EMUCLUSTER_NODES)
  ((PREFIX_OUT == 0)) || [[ -n $LOG_DIR ]] || args+=(--tag-output)
  [[ -z $LOG_DIR ]] || args+=(-x EMUCLUSTER_LOG_DIR)
  if ((LOOPBACK == 0)); then
    for ((k = 0; k < NODES; k++)); do echo "$(ns_node "$k") slots=$RPN"; done >"$hf"
    args+=(--hostfile "$hf" --mca plm_rsh_agent "$HERE/netns-rsh" --mca plm_rsh_no_tree_spawn 1
      --mca btl_tcp_if_include "$SUBNET.0/24" --mca oob_tcp_if_include "$SUBNET.0/24"
      -x EMUCLUSTER_IFACE)
  fi
  # shellcheck disable=SC2206 # word splitting of --mpi-args is the point
  local extra=($MPI_ARGS)
  args+=("${extra[@]}" "$SELF" --_mpi-rank -- "${CMD[@]}")
  export MASTER_ADDR MASTER_PORT=$MASTER_PORT_ARG EMUCLUSTER_SUBNET=$SUBNET.0/24
  export EMUCLUSTER_RANKS_PER_NODE=$RPN EMUCLUSTER_IFACE=$NODE_IF EMUCLUSTER_LOG_DIR=$LOG_DIR
  export EMUCLUSTER_PLACEMENT=$PLACEMENT EMUCLUSTER_NODES=$NODES
  say "mpirun ${args[*]}"
  # mpirun itself lives on node 0, where it can reach every node's daemon.
  if ((LOOPBACK)); then
    setsid "${args[@]}" </dev/null &
  else
    setsid ip netns exec "$(ns_node 0)" "${args[@]}" </dev/null &
  fi
  RANK_PIDS+=("$!")
  RANK_OF_PID[$!]=mpirun
}

# Ranks are polled rather than waited for with `wait -n`: bash forgets a
# finished job once it has forked something else, and `wait -n PID...` then
# fails with "no such job". `wait PID` still returns the saved status of any
# child, which is all we need.
wait_ranks() {
  declare -gA STATUS=()
  local remaining=("${RANK_PIDS[@]}") first_fail="" first_code=0 deadline=""
  [[ -z $TIMEOUT ]] || deadline=$(awk -v s="$START_TIME" -v t="$TIMEOUT" 'BEGIN { printf "%.3f", s + t }')
  while ((${#remaining[@]})); do
    local next=() p
    for p in "${remaining[@]}"; do
      if kill -0 "$p" 2>/dev/null; then
        next+=("$p")
        continue
      fi
      local st=0 who=${RANK_OF_PID[$p]}
      wait "$p" 2>/dev/null || st=$?
      STATUS[$who]=$st
      if ((st != 0)) && [[ -z $first_fail ]] && ((STOPPING == 0)); then
        first_fail=$who
        first_code=$st
      fi
    done
    remaining=("${next[@]}")
    ((${#remaining[@]})) || break
    if [[ -n $first_fail ]] && ((STOPPING == 0)) && ((FAIL_FAST)); then
      say "rank $first_fail exited with code $first_code; stopping the others (--no-fail-fast lets them finish)"
      STOPPING=1
      stop_ranks
      continue
    fi
    if [[ -n $deadline ]] && ((TIMED_OUT == 0)) &&
      awk -v n="$EPOCHREALTIME" -v d="$deadline" 'BEGIN { exit !(n >= d) }'; then
      TIMED_OUT=1
      STOPPING=1
      say "--timeout $TIMEOUT s expired, stopping the ranks"
      stop_ranks
      continue
    fi
    sleep 0.1
  done
  FIRST_FAIL=$first_fail
  FIRST_CODE=$first_code
}

report_ranks() {
  local r bad=() killed=()
  if ((MPI)); then
    local st=${STATUS[mpirun]}
    if ((st != 0)) && ((TIMED_OUT)); then
      killed+=(all)
    elif ((st != 0)); then
      bad+=("mpirun exited with code $st (its message above names the rank)")
    fi
  else
    for ((r = 0; r < WORLD; r++)); do
      local st=${STATUS[$r]} k
      k=$(node_of "$r")
      ((st == 0)) && continue
      if ((st > 128)) && [[ $r != "$FIRST_FAIL" ]] && ((STOPPING)); then
        killed+=("$r")
      else
        bad+=("rank $r (node$k): exit code $st")
      fi
    done
  fi
  if ((${#bad[@]} == 0 && ${#killed[@]} == 0)); then
    say "all $WORLD ranks exited with code 0"
    return 0
  fi
  local b
  for b in "${bad[@]}"; do echo "emucluster: FAILED $b" >&2; done
  ((${#killed[@]} == 0)) || echo "emucluster: stopped by us: rank ${killed[*]}" >&2
}

# --- main ----------------------------------------------------------------------------------------------

# A port nobody listens on here. Only --loopback needs the search: node 0's
# namespace is fresh, nothing listens there.
free_port() {
  local p i
  for ((i = 0; i < 50; i++)); do
    p=$((20000 + RANDOM % 30000))
    if command -v ss >/dev/null; then
      [[ -z $(ss -Hltn "sport = :$p" 2>/dev/null) ]] && { echo "$p"; return; }
    elif ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  echo 29500
}

if ((LOOPBACK)); then
  MASTER_ADDR=127.0.0.1
  [[ -n $MASTER_PORT_ARG ]] || MASTER_PORT_ARG=$(free_port)
  ((CHECK_RATE == 0)) || say "--loopback: no links to shape or measure"
  ((${#LINK_DOWN[@]} == 0)) || die $EX_USAGE "--link-down needs the emulated links (not --loopback)"
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
  exit $EX_TIMEOUT
fi
if [[ -n $FIRST_FAIL ]]; then
  exit "$FIRST_CODE"
fi
exit 0
