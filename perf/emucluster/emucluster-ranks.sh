# Running the ranks, for perf/emucluster/emucluster.sh, sourced by it (not a program of
# its own): the plain launcher (one process per rank in its node's namespace,
# output prefixed or logged), the --mpi launcher (mpirun across the nodes
# through netns-rsh) with the wrapper each MPI rank starts in, and the loop
# that waits for the ranks, stops them on failure or timeout, and reports.
# shellcheck shell=bash disable=SC2154 # variables are the main script's

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

launch_plain() {
  local k l r ns envs o e defsig=()
  # Background commands of a non-interactive shell start with SIGINT and
  # SIGQUIT ignored; ranks should see the defaults, as under any launcher.
  # shellcheck disable=SC2054 # the comma belongs to env's option
  if env --default-signal=INT,QUIT true 2>/dev/null; then defsig=(--default-signal=INT,QUIT); fi
  for ((k = 0; k < NODES; k++)); do
    for ((l = 0; l < RPN; l++)); do
      r=$(rank_of "$k" "$l")
      ns=$(ns_node "$k")
      envs=(ZPP_HOSTID="node$k" RANK="$r" WORLD_SIZE="$WORLD" LOCAL_RANK="$l" LOCAL_WORLD_SIZE="$RPN"
        GROUP_RANK="$k" NODE_RANK="$k" MASTER_ADDR="$MASTER_ADDR" MASTER_PORT="$MASTER_PORT_ARG"
        EMUCLUSTER_NODE="$k" EMUCLUSTER_SUBNET="$SUBNET.0/24")
      local launcher=()
      if ((LOOPBACK)); then
        launcher=(setsid env "${defsig[@]}" "${envs[@]}")
      else
        envs+=(EMUCLUSTER_NS="$ns" EMUCLUSTER_IFACE="$NODE_IF")
        # The node's own hostname (in a private UTS namespace, the host's is
        # untouched) so that code keyed on gethostname sees distinct nodes.
        # shellcheck disable=SC2016 # "$0", "$@" are the inner sh's arguments
        launcher=(setsid ip netns exec "$ns" unshare --uts -- env "${defsig[@]}" "${envs[@]}"
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
        # shellcheck disable=SC2004 # associative (declared -A by the main script): the key is the pid
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
  # shellcheck disable=SC2034 # the exit code of the main script
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
