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
extra=
if [ "$tool" = memcheck ]; then
  extra="--leak-check full"
fi
# --error-exitcode: a finding fails the test even when the program's own
# checks pass.
exec "$san" --tool "$tool" $extra --error-exitcode 99 "$bin" "$@"
