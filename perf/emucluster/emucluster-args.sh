# The command line of perf/emucluster/emucluster.sh, sourced by it (not a program of its
# own): the help text, every option's default, and parse_args, which reads the
# options, checks them all before anything is built, and derives what the rest
# of the script uses (each node's rate in bit/s, the link faults, WORLD).
# shellcheck shell=bash disable=SC2154 # variables are the main script's
# shellcheck disable=SC2034 # the options set here are read by the other parts

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
      --strict-rate       a link off its rate is an error (exit "$EX_RATE")
Running:
      --mpi               start the ranks with mpirun across the nodes
      --mpi-args "ARGS"   extra mpirun arguments (word-split)
      --loopback          no namespaces, no shaping, no root: ranks run on
                          this machine with the same environment
      --master-port P     MASTER_PORT (default 29500: node 0's namespace is
                          fresh, so any port is free there; --loopback picks
                          a free one)
      --timeout S         stop all ranks after S seconds (exit "$EX_TIMEOUT")
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

# The defaults. The links' queues and congestion control (TBF_LATENCY,
# TBF_BURST, HOST_QUEUE_PKTS, TCP_CC) are set, with their reasons, where the
# links are shaped: emucluster-cluster.sh.
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

need_arg() { [[ $# -ge 2 ]] || die "$EX_USAGE" "$1 needs a value (see --help)"; }
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
is_num() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }

parse_args() {
  local k spec
  while [[ $# -gt 0 ]]; do
    case $1 in
      -n | --nodes) need_arg "$@"; NODES=$2; shift 2 ;;
      -l | --ranks-per-node) need_arg "$@"; RPN=$2; shift 2 ;;
      --placement) need_arg "$@"; PLACEMENT=$2; shift 2 ;;
      -r | --rate) need_arg "$@"; RATE_ARG=$2; shift 2 ;;
      --node-rate)
        need_arg "$@"
        [[ $2 =~ ^([0-9]+)=(.+)$ ]] || die "$EX_USAGE" "--node-rate wants K=RATE, e.g. 2=200mbit (got '$2')"
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
      -*) die "$EX_USAGE" "unknown option '$1' (see --help)" ;;
      *) CMD=("$@"); break ;;
    esac
  done

  { is_uint "$NODES" && ((NODES >= 1 && NODES <= 200)); } || die "$EX_USAGE" "-n wants 1..200 nodes (got '$NODES')"
  { is_uint "$RPN" && ((RPN >= 1 && RPN <= 64)); } || die "$EX_USAGE" "-l wants 1..64 ranks per node (got '$RPN')"
  [[ -z $TBF_BURST || $TBF_BURST =~ ^[0-9]+[kKmM]?b?$ ]] ||
    die "$EX_USAGE" "--tbf-burst wants bytes, e.g. 64k (got '$TBF_BURST')"
  [[ $TBF_LATENCY =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] ||
    die "$EX_USAGE" "--tbf-latency wants a time, e.g. 1ms (got '$TBF_LATENCY')"
  [[ $HOST_QUEUE_PKTS == switch ]] || { is_uint "$HOST_QUEUE_PKTS" && ((HOST_QUEUE_PKTS >= 1 && HOST_QUEUE_PKTS <= 100000)); } ||
    die "$EX_USAGE" "--host-queue wants 1..100000 packets or 'switch' (got '$HOST_QUEUE_PKTS')"
  [[ $PLACEMENT == blocks || $PLACEMENT == cyclic ]] ||
    die "$EX_USAGE" "--placement wants blocks or cyclic (got '$PLACEMENT')"
  { [[ $SUBNET =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] &&
    ((BASH_REMATCH[1] < 256 && BASH_REMATCH[2] < 256 && BASH_REMATCH[3] < 256)); } ||
    die "$EX_USAGE" "--subnet wants the first three octets of a /24, e.g. 10.213.0 (got '$SUBNET')"
  [[ -z $MASTER_PORT_ARG ]] || { is_uint "$MASTER_PORT_ARG" && ((MASTER_PORT_ARG > 0 && MASTER_PORT_ARG < 65536)); } ||
    die "$EX_USAGE" "--master-port wants a TCP port (got '$MASTER_PORT_ARG')"
  { is_num "$RATE_SECONDS" && is_uint "$RATE_TRIES" && ((RATE_TRIES >= 1)) && is_num "$RATE_TOL"; } ||
    die "$EX_USAGE" "--rate-seconds, --rate-tries, --rate-tolerance want positive numbers"
  [[ -z $TIMEOUT ]] || is_num "$TIMEOUT" || die "$EX_USAGE" "--timeout wants seconds (got '$TIMEOUT')"
  is_num "$GRACE" || die "$EX_USAGE" "--grace wants seconds (got '$GRACE')"
  if [[ -n $PREFIX ]]; then
    # The prefix names namespaces and hostnames; keep it to safe characters.
    [[ $PREFIX =~ ^[A-Za-z0-9_.]{1,32}$ ]] || die "$EX_USAGE" "--prefix wants 1-32 of [A-Za-z0-9_.] (got '$PREFIX')"
  fi

  RATE_BPS=$(parse_rate "$RATE_ARG") || die "$EX_USAGE" "bad rate '$RATE_ARG': use bits per second, e.g. 200mbit, 1gbit, 1.5g, or none"
  declare -ga NODE_BPS=()
  for ((k = 0; k < NODES; k++)); do NODE_BPS[k]=$RATE_BPS; done
  for k in "${!NODE_RATE_ARG[@]}"; do
    ((k < NODES)) || die "$EX_USAGE" "--node-rate names node $k, but there are only $NODES nodes (0..$((NODES - 1)))"
    NODE_BPS[k]=$(parse_rate "${NODE_RATE_ARG[$k]}") ||
      die "$EX_USAGE" "bad rate '${NODE_RATE_ARG[$k]}' for node $k: use bits per second, e.g. 200mbit"
  done

  declare -ga LD_NODE=() LD_AT=() LD_FOR=()
  for spec in "${LINK_DOWN[@]}"; do
    [[ $spec =~ ^([0-9]+)@([0-9]+(\.[0-9]+)?)(\+([0-9]+(\.[0-9]+)?))?$ ]] ||
      die "$EX_USAGE" "--link-down wants NODE@SECONDS[+DURATION], e.g. 1@5 or 1@5+3 (got '$spec')"
    ((BASH_REMATCH[1] < NODES)) || die "$EX_USAGE" "--link-down names node ${BASH_REMATCH[1]}, but there are only $NODES nodes"
    LD_NODE+=("${BASH_REMATCH[1]}")
    LD_AT+=("${BASH_REMATCH[2]}")
    LD_FOR+=("${BASH_REMATCH[5]}")
  done

  if [[ -n $LOG_DIR ]]; then
    mkdir -p "$LOG_DIR" || die "$EX_USAGE" "cannot create --log-dir '$LOG_DIR'"
    LOG_DIR=$(readlink -f "$LOG_DIR")
  fi
  if [[ -n $RATE_JSON ]]; then
    # Fail now rather than after the measurement; an old file is replaced then.
    [[ -w $(dirname "$RATE_JSON") ]] || die "$EX_USAGE" "cannot write --rate-json '$RATE_JSON' (directory not writable)"
    rm -f "$RATE_JSON"
  fi

  WORLD=$((NODES * RPN))
}
