#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every
# test. Tests that need a GPU (label gpu) or root (label netns) report as
# skipped, not passed, where they cannot run; so do the PyTorch tests (label
# torch) where torch cannot be installed (scripts/setup-torch.sh says why).
#
# Three passes. First everything but the tests labelled `timing` or `torch`,
# in parallel, while torch's environments and torch_zpp are set up beside
# them (scripts/setup-torch.sh: minutes of compiling, which the tests, many
# of them waiting on timeouts and dead peers, leave room for; its output is
# printed when it ends). Then the `torch` tests, in parallel. Then the
# `timing` tests, one at a time: they measure bandwidth (a shaped
# link's rate, whether zpp-health calls a cluster healthy or names the slow
# node) on what is often a shared 2-core VM, where another tenant can take the
# CPU for seconds. A failed one is run again, up to three runs in all, with
# its criterion unchanged: a real fault fails every run, a noisy neighbour
# does not. Extra arguments go to every ctest pass (e.g. -L quant: several
# -L must all match, so the torch pass then finds nothing and says so).
set -euo pipefail
cd "$(dirname "$0")/.."
phases=()
# phase NAME: notes the wall time since the previous phase ended.
last=$SECONDS
phase() {
  phases+=("$(printf '%-11s %5d s' "$1" $((SECONDS - last)))")
  last=$SECONDS
}
bash scripts/setup-deps.sh
phase setup
bash scripts/build.sh
phase build
jobs=$(nproc 2>/dev/null || echo 2)
status=0
torchlog=build/setup-torch.log
bash scripts/setup-torch.sh >"$torchlog" 2>&1 & # torch + torch_zpp for the tests labelled torch
torch=$!
cd build
ctest --output-on-failure -j"$jobs" -LE "timing|torch" "$@" || status=1
phase tests
torchok=1
wait "$torch" || torchok=0
cat "../$torchlog"
if ((torchok == 0)); then
  echo "zpp tests: scripts/setup-torch.sh failed (above); the torch tests will say what is missing" >&2
  status=1
fi
phase torch # what it took beyond the tests beside it
ctest --output-on-failure -j"$jobs" -L torch -LE timing "$@" || status=1
phase torch-tests
ctest --output-on-failure -L timing --repeat until-pass:3 "$@" || status=1
phase timing
echo "zpp tests: wall time per phase"
printf '  %s\n' "${phases[@]}"
if ((status != 0)); then
  echo "zpp tests: FAILED (see the output above)" >&2
fi
exit "$status"
