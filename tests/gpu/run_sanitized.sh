#!/bin/sh
# Runs a GPU test under compute-sanitizer, or reports "skipped" (77) when no
# device is usable: compute-sanitizer itself fails without one, so the test
# binary is asked first (--probe) and prints why it would skip.
# usage: run_sanitized.sh COMPUTE_SANITIZER TOOL TEST_BINARY [TEST_ARGS...]
san=$1
tool=$2
bin=$3
shift 3
"$bin" --probe
rc=$?
if [ "$rc" -ne 0 ]; then
  exit "$rc"
fi
# --error-exitcode: a finding fails the test even when the program's own
# checks pass.
if [ "$tool" = memcheck ]; then
  exec "$san" --tool "$tool" --leak-check full --error-exitcode 99 "$bin" "$@"
fi
exec "$san" --tool "$tool" --error-exitcode 99 "$bin" "$@"
