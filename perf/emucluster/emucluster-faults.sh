# Link faults (--link-down) of perf/emucluster/emucluster.sh, sourced by it (not a
# program of its own): one timer subshell per fault takes a node's link down
# at its moment after the ranks start, and up again after its duration.
# shellcheck shell=bash disable=SC2154 # variables are the main script's

# A sleep without a child process: read with a timeout on a pipe that never
# delivers. Only for the timer subshells, which have no traps: bash 5.2
# crashes (SIGSEGV) when a trap exits the shell while `read -t` waits, so the
# main shell sleeps with sleep(1). TICK_FD is opened by start_link_faults.
tick() { read -rt "${1:-0.1}" -u "$TICK_FD" || true; }

# Pulling the cable: the hub side goes down, so the node's veth loses carrier
# and nothing passes either way. TCP connections are not reset, they stall,
# just as they do when a real link dies.
start_link_faults() {
  local i hub
  hub=$(ns_hub)
  exec {TICK_FD}<> <(:)
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
