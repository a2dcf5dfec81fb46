#!/usr/bin/env bash
# Makes the PyTorch environment the torch tests (label torch) and the FSDP
# benchmark use: torch from PyPI in a virtual environment *outside* the
# checkout (a fresh clone reuses it: torch is 6.8 GB and takes minutes to
# install), and torch_zpp built against it and this checkout's build/ into
# build/torch/site. Writes build/torch/env.sh, which tests/torch/run.sh reads.
#
# When torch cannot be installed (no network, no python3 venv), this says why
# and exits 0: the torch tests then skip (exit 77) with that reason. A
# torch_zpp that fails to build is an error.
#
#   ZPP_TORCH=0            do not install; the torch tests skip
#   ZPP_TORCH_VERSION      torch version to install (default 2.9.1, the tested one)
#   ZPP_TORCH_VENV         where the environment lives
#                          (default ~/.cache/zpp/torch-VERSION-pyX.Y)
#   ZPP_BUILD_DIR          the zpp build to use (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${ZPP_BUILD_DIR:-$root/build}
out=$build/torch
mkdir -p "$out"
version=${ZPP_TORCH_VERSION:-2.9.1}

skip() {
  echo "zpp setup-torch: $1; the torch tests will be skipped" >&2
  printf 'ZPP_TORCH_SKIP=%q\n' "$1" > "$out/env.sh"
  exit 0
}

[[ "${ZPP_TORCH:-1}" == 0 ]] && skip "ZPP_TORCH=0"
py=$(command -v python3 || true)
[[ -n "$py" ]] || skip "no python3"
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
venv=${ZPP_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/zpp/torch-$version-py$pyver}
mkdir -p "$(dirname "$venv")"

# One installer at a time per environment (checkouts may share it); an
# environment without the marker was interrupted and is made again.
exec 9> "$venv.lock"
flock 9
if [[ ! -f "$venv/.zpp-complete" ]]; then
  rm -rf "$venv"
  echo "zpp setup-torch: installing torch==$version from PyPI into $venv (about 2 min, 7 GB)"
  "$py" -m venv "$venv" || skip "python3 -m venv failed (Debian: python3-venv)"
  if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      "torch==$version" numpy setuptools wheel; then
    rm -rf "$venv"
    skip "pip could not install torch==$version (no network, or no wheel for Python $pyver)"
  fi
  touch "$venv/.zpp-complete"
fi
flock -u 9

echo "zpp setup-torch: building torch_zpp against torch $version and $build"
rm -rf "$out/site"
ZPP_BUILD_DIR=$build "$venv/bin/python" -m pip install -q --disable-pip-version-check \
  --no-build-isolation --no-deps --target "$out/site" "$root/python"
# pip builds in python/build; keep the source tree clean for the next build.
rm -rf "$root/python/build" "$root/python/torch_zpp.egg-info"
{
  printf 'ZPP_TORCH_PYTHON=%q\n' "$venv/bin/python"
  printf 'ZPP_TORCH_SITE=%q\n' "$out/site"
} > "$out/env.sh"
"$venv/bin/python" -c "import sys; sys.path.insert(0, '$out/site'); import torch_zpp; \
print('zpp setup-torch: torch', __import__('torch').__version__, 'torch_zpp', torch_zpp.build_info())"
