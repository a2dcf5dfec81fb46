#!/usr/bin/env bash
# The lint gates of CI (.ci/run), runnable on their own:
#
#   bash scripts/lint.sh             every gate
#   bash scripts/lint.sh shellcheck  one or more of: shellcheck ruff format
#
# - shellcheck: every shell script (tracked or new, not ignored: *.sh and
#   files whose first line runs sh or bash), `shellcheck -x` at its default
#   severity, style: the tree is clean at that level, and the info and style
#   findings (unquoted variables, A && B || C) are the ones that bite in
#   scripts run as root. A finding is fixed, or disabled on its line with a
#   comment saying why.
# - ruff: the Python, with ruff.toml at the root (ruff check).
# - format: C, C++ and CUDA against .clang-format (scripts/check-format.sh).
#
# Installs its tools when missing: shellcheck and clang-format from Debian
# (as root; otherwise it names them and stops), ruff from PyPI into a
# virtual environment outside the checkout (~/.cache/zpp/lint-ruff-VERSION,
# reused by later runs and fresh clones). Every gate runs even when one
# before it failed; the exit code is 1 if any failed. How to fix what each
# reports: docs/code-style.md, "Gates".
set -euo pipefail
cd "$(dirname "$0")/.."

# The ruff that CI runs; a newer one may add findings, so it is pinned.
RUFF_VERSION=0.17.6

gates=("$@")
((${#gates[@]})) || gates=(shellcheck ruff format)

install_debian() { # packages...
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "zpp lint: missing Debian packages: ${missing[*]} (as root: apt-get install -y ${missing[*]})" >&2
    return 1
  fi
  echo "zpp lint: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ruff from PyPI, one venv per version; a lock keeps two checkouts from
# building the same one at once, a marker tells a finished one.
RUFF=
setup_ruff() {
  local venv=${XDG_CACHE_HOME:-$HOME/.cache}/zpp/lint-ruff-$RUFF_VERSION
  mkdir -p "$(dirname "$venv")"
  exec 8>"$venv.lock"
  flock -w 300 8 || { echo "zpp lint: $venv.lock held for 5 minutes" >&2; return 1; }
  if [[ ! -f $venv/.zpp-ready ]]; then
    rm -rf "$venv"
    if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q "ruff==$RUFF_VERSION"; }; then
      echo "zpp lint: could not install ruff $RUFF_VERSION from PyPI into $venv" >&2
      exec 8>&-
      return 1
    fi
    touch "$venv/.zpp-ready"
  fi
  exec 8>&-
  RUFF=$venv/bin/ruff
}

shell_files() {
  local f
  git ls-files -co --exclude-standard | while read -r f; do
    [[ -f $f ]] || continue
    if [[ $f == *.sh ]] || head -n 1 "$f" | grep -qE '^#!.*(/|env )(ba)?sh\b'; then echo "$f"; fi
  done
}

gate_shellcheck() {
  install_debian shellcheck || return 1
  local files=()
  mapfile -t files < <(shell_files)
  shellcheck -x "${files[@]}" || return 1
  echo "zpp lint: shellcheck: ${#files[@]} scripts clean"
}

gate_ruff() {
  install_debian python3-venv || return 1
  setup_ruff || return 1
  "$RUFF" check . || return 1
}

gate_format() {
  install_debian clang-format || return 1
  bash scripts/check-format.sh || return 1
}

status=0
for g in "${gates[@]}"; do
  start=$SECONDS
  rc=0
  case $g in
    shellcheck) gate_shellcheck || rc=1 ;;
    ruff) gate_ruff || rc=1 ;;
    format) gate_format || rc=1 ;;
    *) echo "zpp lint: unknown gate '$g' (shellcheck, ruff, format)" >&2; exit 2 ;;
  esac
  if ((rc == 0)); then
    echo "zpp lint: $g: ok ($((SECONDS - start)) s)"
  else
    echo "zpp lint: $g: FAILED ($((SECONDS - start)) s; docs/code-style.md, Gates, says how to fix)" >&2
    status=1
  fi
done
exit "$status"
