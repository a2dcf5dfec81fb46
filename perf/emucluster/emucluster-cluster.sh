# The emulated cluster itself, for perf/emucluster/emucluster.sh, sourced by it (not a
# program of its own): how links are shaped and why, the names of namespaces
# and interfaces, building the nodes and the hub, finding and removing
# clusters (--list, --cleanup), and the teardown that runs on exit, failure or
# signal.
# shellcheck shell=bash disable=SC2154 # variables are the main script's

# --- links -------------------------------------------------------------------

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

# --list and --cleanup (ACTION list or cleanup): print the clusters on this
# machine, or remove those whose owner died (with --prefix, that one). Exits.
maintenance() {
  local found=0 removed=0 p pid state
  [[ $(id -u) == 0 ]] || { echo "$PROG: --$ACTION needs root (network namespaces)" >&2; exit "$EX_SKIP"; }
  if [[ $ACTION == list ]]; then
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
}

# --- building the cluster ---------------------------------------------------------------------------

add_ns() {
  local ns=$1 err
  if ! err=$(ip netns add "$ns" 2>&1); then
    if [[ -e /run/netns/$ns ]]; then
      die "$EX_SETUP" "namespace $ns already exists (a crashed run? see: $PROG --list / --cleanup)"
    fi
    ((${#CREATED_NS[@]} == 0)) || die "$EX_SETUP" "ip netns add $ns failed: $err"
    # Root without CAP_SYS_ADMIN/NET_ADMIN (an unprivileged container) cannot
    # emulate anything: that is "cannot run here", not a failure.
    echo "$PROG: cannot create network namespaces here: $err" >&2
    echo "$PROG: run it on a machine (or privileged container) where 'ip netns add' works, or use --loopback" >&2
    exit "$EX_SKIP"
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
    die "$EX_SETUP" "tc could not shape $dev in $ns to $(fmt_rate "$bps")"
}

build_cluster() {
  local hub k ns
  hub=$(ns_hub)
  add_ns "$hub"
  check_host "$hub"
  ip -n "$hub" link set lo up
  # forward_delay 0: ports forward at once instead of after 15 s of "learning".
  ip -n "$hub" link add br0 type bridge forward_delay 0 || die "$EX_SETUP" "cannot create the bridge (kernel without bridge support?)"
  ip -n "$hub" addr add "$SUBNET.$HUB_HOST/24" dev br0
  ip -n "$hub" link set br0 up
  for ((k = 0; k < NODES; k++)); do
    ns=$(ns_node "$k")
    add_ns "$ns"
    # Both ends are created directly inside their namespaces: no interface
    # ever appears in the host's namespace, even for a moment.
    ip link add "$NODE_IF" netns "$ns" type veth peer name "node$k" netns "$hub" ||
      die "$EX_SETUP" "cannot create the veth pair for node $k"
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

# --- teardown ---------------------------------------------------------------------------------------

# On exit, failure or signal (the main script's traps): helpers and ranks
# stopped, namespaces deleted (unless --keep), the ranks' last output flushed.
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

