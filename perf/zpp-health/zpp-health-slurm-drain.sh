#!/usr/bin/env bash
# zpp-health on one Slurm node, as slurm.conf's HealthCheckProgram or a
# Prolog: runs the node's own check (its ranks forked here, -N) and, when it
# fails, drains the node with a reason that says why (docs/zpp-health.md):
#
#   exit 0 healthy        nothing
#   exit 1 slow           drain "zpp-health exit 1 (slow): <what the verdict line names>"
#   exit 2 usage          nothing: the check is misconfigured, not the node (logged)
#   exit 3 wrong data     drain "zpp-health exit 3 (wrong data): ..."
#   exit 4 hung or dead   drain "zpp-health exit 4 (rank hung or died): ..."
#   exit 5 could not run  drain "zpp-health exit 5 (could not run): ..."
#   killed, timed out     drain "zpp-health exit N (killed or timed out)"
#
# Arguments go to zpp-health (default: $ZPP_HEALTH_ARGS, else "-N 2 -q").
# ZPP_HEALTH names the binary (default: zpp-health on PATH), ZPP_HEALTH_LIMIT
# bounds the run in seconds (default 300). The node is $SLURMD_NODENAME
# (a Prolog has it), else the short host name. Exits 1 after draining, so
# that a Prolog's job is requeued elsewhere; 0 otherwise.
set -u
bin=${ZPP_HEALTH:-zpp-health}
limit=${ZPP_HEALTH_LIMIT:-300}
node=${SLURMD_NODENAME:-$(hostname -s)}
if (($# == 0)); then
  # shellcheck disable=SC2086  # word splitting of the default arguments is wanted
  set -- ${ZPP_HEALTH_ARGS:--N 2 -q}
fi

out=$(timeout --kill-after=10 "$limit" "$bin" "$@" 2>&1)
code=$?
# The last "zpp-health: <verdict>: <detail>" line, its detail only.
verdict=$(printf '%s\n' "$out" | grep '^zpp-health: ' | tail -n 1 | cut -c 13- | tr -d '"')
verdict=${verdict#*: }
case $code in
  0) exit 0 ;;
  1) meaning="slow" ;;
  2)
    echo "zpp-health-slurm-drain: $node: zpp-health is misconfigured, node left as it is: $verdict" >&2
    exit 0
    ;;
  3) meaning="wrong data" ;;
  4) meaning="rank hung or died" ;;
  5) meaning="could not run" ;;
  *) meaning="killed or timed out" ;;
esac
reason=$(printf 'zpp-health exit %d (%s): %s' "$code" "$meaning" "$verdict" | cut -c 1-240)
echo "zpp-health-slurm-drain: draining $node: $reason" >&2
scontrol update nodename="$node" state=drain reason="$reason"
exit 1
