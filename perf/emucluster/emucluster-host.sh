# What the emulated cluster needs from the host, for perf/emucluster/emucluster.sh, sourced
# by it (not a program of its own): root and the tools it runs are checked
# first (without root, the message says how to run it as root or on
# loopback); every kernel feature is probed before anything is built, each
# missing one reported on a line of its own with how to get it; and the one
# host-wide setting the cluster may touch (which TCP congestion controls a
# namespace may choose) is changed for the moment the nodes choose theirs,
# under a lock, and put back.
# shellcheck shell=bash disable=SC2154 # variables are the main script's

# --- root and tools -----------------------------------------------------------

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

check_tools() {
  local missing=() tool
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
  ((${#missing[@]} == 0)) || die "$EX_SETUP" "${#missing[@]} tools missing (above)"
}

# --- kernel features -----------------------------------------------------------

HOST_PROBLEMS=()
problem() { HOST_PROBLEMS+=("$*"); }

# A fresh machine may have these features as modules not yet loaded; root
# loads them, and says so. Kernels without module support (everything built
# in, no modprobe) simply fail the probe again.
load_module() { # module
  command -v modprobe >/dev/null || return 1
  modprobe "$1" 2>/dev/null || return 1
  say "loaded kernel module $1 (modprobe $1)"
}

# Runs a probe command; on failure loads the module and runs it again.
probe() { # module command...
  local module=$1
  shift
  "$@" >/dev/null 2>&1 && return 0
  load_module "$module" && "$@" >/dev/null 2>&1
}

in_words() { # word "list of words" -> success when the word is in the list
  [[ " $2 " == *" $1 "* ]]
}

CC_AVAILABLE=/proc/sys/net/ipv4/tcp_available_congestion_control
CC_ALLOWED=/proc/sys/net/ipv4/tcp_allowed_congestion_control

# The kernel features, probed inside the hub namespace (already made, so
# network namespaces work) with names that cannot clash with the cluster's.
check_host() { # hub namespace
  local hub=$1
  if probe veth ip -n "$hub" link add zppprobe0 type veth peer name zppprobe1; then
    ip -n "$hub" link del zppprobe0 2>/dev/null || true
  else
    problem "no veth links in this kernel (CONFIG_VETH): modprobe veth"
  fi
  if probe bridge ip -n "$hub" link add zppprobebr type bridge; then
    ip -n "$hub" link del zppprobebr 2>/dev/null || true
  else
    problem "no bridges in this kernel (CONFIG_BRIDGE): modprobe bridge"
  fi
  if probe sch_tbf tc -n "$hub" qdisc add dev lo root tbf rate 1gbit burst 32k latency 5ms; then
    tc -n "$hub" qdisc del dev lo root 2>/dev/null || true
  else
    problem "no tbf qdisc in this kernel (CONFIG_NET_SCH_TBF), which shapes the links: modprobe sch_tbf"
  fi
  # Every rank runs in a UTS namespace of its own, to carry its node's name.
  unshare --uts true 2>/dev/null ||
    problem "'unshare --uts' fails here (a kernel without UTS namespaces, or no CAP_SYS_ADMIN): the ranks need it for their node's hostname"
  if [[ $TCP_CC != host ]]; then
    if ! in_words "$TCP_CC" "$(cat "$CC_AVAILABLE" 2>/dev/null)"; then
      load_module "tcp_$TCP_CC" || true
    fi
    if ! in_words "$TCP_CC" "$(cat "$CC_AVAILABLE" 2>/dev/null)"; then
      problem "TCP congestion control '$TCP_CC' is not in this kernel (available: $(cat "$CC_AVAILABLE" 2>/dev/null)): modprobe tcp_$TCP_CC, or --tcp-cc with one of those ('host': the host's default)"
    elif ! in_words "$TCP_CC" "$(cat "$CC_ALLOWED" 2>/dev/null)" && [[ ! -w $CC_ALLOWED ]]; then
      problem "TCP congestion control '$TCP_CC' is not in net.ipv4.tcp_allowed_congestion_control ($(cat "$CC_ALLOWED" 2>/dev/null)), which only root in the host's network namespace can change: add it there, or --tcp-cc with one of those ('host': the host's default)"
    fi
  fi
  if ((${#HOST_PROBLEMS[@]})); then
    local p
    for p in "${HOST_PROBLEMS[@]}"; do echo "$PROG: error: $p" >&2; done
    die "$EX_SETUP" "this host cannot build the emulated cluster (${#HOST_PROBLEMS[@]} missing, above); nothing was left behind"
  fi
}

# A namespace other than the host's may only choose a congestion control
# from the host-wide net.ipv4.tcp_allowed_congestion_control (a fresh kernel
# 6.18 had "reno bbr" there, so cubic was refused with an I/O error). The
# list gates the choice only: a namespace keeps what it chose, and its new
# connections use it, after the list loses the name again (measured on 6.18:
# a socket made in the node after the list was restored ran cubic). So the
# name is added for the moment the nodes choose, and the list is put back at
# once. A lock keeps runs side by side from restoring each other's addition
# in the middle of their own choice; teardown restores too, should the
# script die in between.
CC_LOCK=${EMUCLUSTER_LOCK_DIR:-/run}/zpp-emucluster-tcp-cc.lock
CC_RESTORE=

restore_allowed_cc() {
  [[ -n $CC_RESTORE ]] || return 0
  echo "$CC_RESTORE" >"$CC_ALLOWED" 2>/dev/null ||
    warn "could not restore net.ipv4.tcp_allowed_congestion_control to '$CC_RESTORE'"
  CC_RESTORE=
}

set_nodes_tcp_cc() {
  [[ $TCP_CC == host ]] && return 0
  local lock k ns allowed
  exec {lock}>"$CC_LOCK" || die "$EX_SETUP" "cannot open the lock $CC_LOCK (EMUCLUSTER_LOCK_DIR names another folder)"
  flock -w 60 "$lock" || die "$EX_SETUP" "another emulated cluster has held $CC_LOCK for 60 s"
  allowed=$(cat "$CC_ALLOWED")
  if ! in_words "$TCP_CC" "$allowed"; then
    CC_RESTORE=$allowed
    echo "$allowed $TCP_CC" >"$CC_ALLOWED" 2>/dev/null ||
      die "$EX_SETUP" "cannot add '$TCP_CC' to net.ipv4.tcp_allowed_congestion_control ('$allowed'); or --tcp-cc with one of those"
  fi
  for ((k = 0; k < NODES; k++)); do
    ns=$(ns_node "$k")
    # /proc/sys/net is the writer's namespace's; no sysctl(8), which minimal
    # Debian images lack (procps).
    # shellcheck disable=SC2016 # "$1" is the inner sh's argument
    ip netns exec "$ns" sh -c 'echo "$1" > /proc/sys/net/ipv4/tcp_congestion_control' sh "$TCP_CC" 2>/dev/null ||
      die "$EX_SETUP" "cannot use TCP congestion control '$TCP_CC' in $ns (available: $(cat "$CC_AVAILABLE" 2>/dev/null); allowed: $(cat "$CC_ALLOWED" 2>/dev/null))"
  done
  if [[ -n $CC_RESTORE ]]; then
    restore_allowed_cc
    echo "emucluster: net.ipv4.tcp_allowed_congestion_control is '$allowed' (host-wide): added $TCP_CC while the nodes chose it, then put it back; the nodes keep $TCP_CC (see docs/emulated-cluster.md)" >&2
  fi
  exec {lock}>&-
}
