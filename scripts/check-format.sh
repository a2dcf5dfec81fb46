#!/usr/bin/env bash
# Checks that every tracked C, C++ and CUDA file is formatted as .clang-format
# says (clang-format --dry-run --Werror), and names each file that is not.
# Run by scripts/lint.sh; on its own: bash scripts/check-format.sh [FILE...]
# (default: every tracked *.c *.h *.cpp *.hpp *.cu *.cuh).
#
# Fix a file with `clang-format -i FILE`, or only the lines you changed with
# `git clang-format` (before committing). clang-format's output differs
# between versions: the one that counts is Debian 12's clang-format (14),
# which scripts/lint.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || {
  echo "check-format: no clang-format (Debian: apt-get install clang-format; scripts/lint.sh installs it)" >&2
  exit 1
}
files=("$@")
if ((${#files[@]} == 0)); then
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' '*.cuh')
fi
bad=()
for f in "${files[@]}"; do
  [[ -f $f ]] || continue # deleted in the work tree, not yet committed
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  printf 'check-format: not formatted: %s\n' "${bad[@]}" >&2
  echo "check-format: ${#bad[@]} of ${#files[@]} files differ from .clang-format" \
    "(see one with: clang-format FILE | diff FILE -; fix with: clang-format -i FILE)" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
