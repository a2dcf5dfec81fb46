#!/usr/bin/env bash
# The sanitizer leg of CI: builds zpp with AddressSanitizer and
# UndefinedBehaviorSanitizer (-DZPP_SANITIZE_ADDRESS=ON) and warnings as
# errors into build-asan/, then runs the fast tests: everything but the
# `timing` tests (rates on a shared VM), `netns` (emulated cluster) and
# `gpu`, and those labelled `sanitized_long`: repeated fault trials whose
# code paths the ones kept here already take (tests/comm/coll_tests.cmake
# says which), left out to keep CI within its time. The longer suite runs
# them too: ZPP_SANITIZED_LONG=1 bash scripts/test-sanitized.sh (3 more
# minutes; add -L sanitized_long for those alone). About 9 minutes on 2
# cores. CUDA is left out: its kernels cannot run without a GPU, and nvcc
# is the slowest part of a build.
#
# Any sanitizer report fails the test that made it: UBSan stops at its first
# finding, LeakSanitizer ignores only OpenMPI's own allocations
# (scripts/lsan.supp). Extra arguments go to ctest (e.g. -L quant).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bash scripts/setup-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
command -v ninja >/dev/null && export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja} # as build.sh
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZPP_SANITIZE_ADDRESS=ON \
  -DZPP_WITH_CUDA=OFF -DZPP_WERROR=ON >build-asan.log 2>&1 || { tail -40 build-asan.log >&2; exit 1; }
cmake --build build-asan -j"$jobs" >>build-asan.log 2>&1 || {
  grep -E 'error|warning' build-asan.log | head -40 >&2
  echo "zpp sanitized tests: build failed (full log: build-asan.log)" >&2
  exit 1
}
# Full stacks at malloc (fast_unwind_on_malloc=0): OpenMPI's plugins are
# unloaded by exit, and a short stack would not reach the library that the
# suppression names.
export ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:abort_on_error=0
export LSAN_OPTIONS=suppressions=$root/scripts/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
cd build-asan
skip='timing|netns|gpu|sanitized_long'
[[ ${ZPP_SANITIZED_LONG:-0} == 1 ]] && skip='timing|netns|gpu'
if ! ctest --output-on-failure -j"$jobs" -LE "$skip" "$@"; then
  echo "zpp sanitized tests: FAILED (see the output above)" >&2
  exit 1
fi
