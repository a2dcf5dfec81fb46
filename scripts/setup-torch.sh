#!/usr/bin/env bash
# Makes the PyTorch environments the torch tests (label torch) and the FSDP
# benchmark use, one per tested torch version (python/torch-versions.txt:
# the oldest and the newest supported): torch from PyPI in a virtual
# environment *outside* the checkout (a fresh clone reuses it: torch is
# 5-7 GB and takes minutes to install), and torch_zpp built against it and
# this checkout's build/ into build/torch/VERSION/site. Writes
# build/torch/VERSION/env.sh, which tests/torch/run.sh reads, and
# build/torch/env.sh (the first version's), which the benchmarks read.
#
# When torch cannot be installed (no network, no python3 venv), this says why
# and exits 0: that version's torch tests then skip (exit 77) with that
# reason. A torch_zpp that fails to build is an error.
#
#   ZPP_TORCH=0            do not install; the torch tests skip
#   ZPP_TORCH_VERSIONS     the versions, separated by spaces (default: those
#                          of python/torch-versions.txt)
#   ZPP_TORCH_VERSION      one version only (the same as ZPP_TORCH_VERSIONS=V)
#   ZPP_TORCH_VENV         where the environment lives, with one version only
#                          (default ~/.cache/zpp/torch-VERSION-pyX.Y)
#   ZPP_BUILD_DIR          the zpp build to use (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${ZPP_BUILD_DIR:-$root/build}
build=$(cd "$build" 2>/dev/null && pwd || echo "$build")
mkdir -p "$build/torch"
if [[ -n "${ZPP_TORCH_VERSION:-}" ]]; then
  versions=$ZPP_TORCH_VERSION
elif [[ -n "${ZPP_TORCH_VERSIONS:-}" ]]; then
  versions=$ZPP_TORCH_VERSIONS
else
  versions=$(grep -v '^#' python/torch-versions.txt | tr '\n' ' ')
fi
read -r -a versions <<<"$versions"
((${#versions[@]} > 0)) || { echo "zpp setup-torch: no torch version to set up" >&2; exit 1; }
if [[ -n "${ZPP_TORCH_VENV:-}" ]] && ((${#versions[@]} > 1)); then
  echo "zpp setup-torch: ZPP_TORCH_VENV names one environment; choose one version (ZPP_TORCH_VERSION)" >&2
  exit 1
fi

# skip OUT VERSION REASON: that version's tests will skip, saying why.
skip() {
  echo "zpp setup-torch: torch $2: $3; its torch tests will be skipped" >&2
  mkdir -p "$1"
  printf 'ZPP_TORCH_SKIP=%q\n' "torch $2: $3" >"$1/env.sh"
}

# setup VERSION: the environment and torch_zpp for one torch version.
setup() {
  local version=$1 out=$build/torch/$1 py pyver venv
  rm -rf "$out/site" "$out/src" "$out/env.sh"
  mkdir -p "$out"
  if [[ "${ZPP_TORCH:-1}" == 0 ]]; then
    skip "$out" "$version" "ZPP_TORCH=0"
    return 0
  fi
  py=$(command -v python3 || true)
  [[ -n "$py" ]] || { skip "$out" "$version" "no python3"; return 0; }
  pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  venv=${ZPP_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/zpp/torch-$version-py$pyver}
  mkdir -p "$(dirname "$venv")"

  # One installer at a time per environment (checkouts may share it); an
  # environment without the marker was interrupted and is made again.
  exec 9>"$venv.lock"
  flock 9
  if [[ ! -f "$venv/.zpp-complete" ]]; then
    rm -rf "$venv"
    echo "zpp setup-torch: installing torch==$version from PyPI into $venv (about 2 min, 5-7 GB)"
    if ! "$py" -m venv "$venv"; then
      flock -u 9
      skip "$out" "$version" "python3 -m venv failed (Debian: python3-venv)"
      return 0
    fi
    if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      "torch==$version" numpy setuptools wheel; then
      rm -rf "$venv"
      flock -u 9
      skip "$out" "$version" "pip could not install torch==$version (no network, or no wheel for Python $pyver)"
      return 0
    fi
    touch "$venv/.zpp-complete"
  fi
  flock -u 9

  # Built from a copy of python/: pip builds in the source directory, and
  # builds for two torch versions (or two checkouts' builds) must not share
  # its object files or its _build_info.json.
  echo "zpp setup-torch: building torch_zpp against torch $version and $build"
  mkdir -p "$out/src"
  cp -r "$root/python" "$out/src/python"
  rm -rf "$out/src/python/build" "$out/src/python"/*.egg-info
  find "$out/src/python" -name __pycache__ -prune -exec rm -rf {} +
  ln -s "$root/include" "$out/src/include"
  (cd "$out/src/python" && ZPP_BUILD_DIR=$build "$venv/bin/python" -m pip install -q \
    --disable-pip-version-check --no-build-isolation --no-deps --target "$out/site" .)
  rm -rf "$out/src"
  {
    printf 'ZPP_TORCH_PYTHON=%q\n' "$venv/bin/python"
    printf 'ZPP_TORCH_SITE=%q\n' "$out/site"
  } >"$out/env.sh"
  "$venv/bin/python" -c "import sys; sys.path.insert(0, '$out/site'); import torch_zpp; \
print('zpp setup-torch: torch', __import__('torch').__version__, 'torch_zpp', torch_zpp.build_info())"
}

for v in "${versions[@]}"; do
  setup "$v"
done
# The benchmarks' environment: the first version's.
cp "$build/torch/${versions[0]}/env.sh" "$build/torch/env.sh"
