#!/usr/bin/env bash
# Makes the PyTorch environments the torch tests (label torch) and the FSDP
# benchmark use, one per tested torch version (python/torch-versions.txt:
# the oldest and the newest supported): torch from PyPI in a virtual
# environment *outside* the checkout (a fresh clone reuses it: torch is
# 5-7 GB and takes minutes to install), and torch_zpp for it, one of two ways:
#
#   from a build   torch_zpp built against this checkout's build/ into
#                  build/torch/VERSION/site (what a developer does: it links
#                  build/lib/libzpp.so). The oldest version, by default.
#   from a wheel   what a user does (docs/pytorch.md, "Installing"): a wheel
#                  made by `python -m build --wheel --no-isolation ./python`
#                  from a clean copy of the tree (its files as git lists them:
#                  no build/), which builds its own libzpp with CMake and
#                  carries it; the copy is then removed, and the wheel is
#                  installed with pip, offline, into a fresh virtual
#                  environment in build/torch/VERSION/venv that sees the
#                  cached torch through a .pth file. Every torch test of that
#                  version then runs from the installed wheel. The newest
#                  version, by default.
#
# Writes build/torch/VERSION/env.sh, which tests/torch/run.sh reads, and
# build/torch/env.sh (the first version's), which the benchmarks read.
#
# When torch cannot be installed (no network, no python3 venv), this says why
# and exits 0: that version's torch tests then skip (exit 77) with that
# reason. A torch_zpp that fails to build or install is an error.
#
#   ZPP_TORCH=0            do not install; the torch tests skip
#   ZPP_TORCH_VERSIONS     the versions, separated by spaces (default: those
#                          of python/torch-versions.txt)
#   ZPP_TORCH_VERSION      one version only (the same as ZPP_TORCH_VERSIONS=V)
#   ZPP_TORCH_WHEEL        which versions come from a wheel: newest (the
#                          default; the last of the list), all, or none
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

# setup VERSION HOW: the environment and torch_zpp (HOW: build or wheel) for one torch version.
setup() {
  local version=$1 out=$build/torch/$1 py pyver venv
  rm -rf "$out/site" "$out/src" "$out/env.sh" "$out/venv" "$out/dist"
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

  if [[ $2 == wheel ]]; then
    from_wheel "$version" "$venv" "$out" "$py"
  else
    from_build "$version" "$venv" "$out"
  fi
  (
    # shellcheck source=/dev/null # just written
    source "$out/env.sh"
    PYTHONPATH=$ZPP_TORCH_SITE "$ZPP_TORCH_PYTHON" -c "import torch, torch_zpp; \
print('zpp setup-torch: torch', torch.__version__, 'torch_zpp', torch_zpp.build_info())"
  )
}

# from_build VERSION VENV OUT: torch_zpp against this checkout's build/.
from_build() {
  local version=$1 venv=$2 out=$3
  # Built from a copy of python/: pip builds in the source directory, and
  # builds for two torch versions (or two checkouts' builds) must not share
  # its object files or its _build_info.json.
  echo "zpp setup-torch: building torch_zpp against torch $version and $build"
  mkdir -p "$out/src"
  cp -r "$root/python" "$out/src/python"
  rm -rf "$out/src/python/build" "$out/src/python"/*.egg-info "$out/src/python/torch_zpp"/{_build_info.json,*.so*}
  find "$out/src/python" -name __pycache__ -prune -exec rm -rf {} +
  (cd "$out/src/python" && ZPP_BUILD_DIR=$build "$venv/bin/python" -m pip install -q \
    --disable-pip-version-check --no-build-isolation --no-deps --target "$out/site" .)
  rm -rf "$out/src"
  {
    printf 'ZPP_TORCH_PYTHON=%q\n' "$venv/bin/python"
    printf 'ZPP_TORCH_SITE=%q\n' "$out/site"
  } >"$out/env.sh"
}

# from_wheel VERSION VENV OUT PYTHON3: the user's path (see the top).
from_wheel() {
  local version=$1 venv=$2 out=$3 py=$4 src=$3/src log=$3/wheel-build.log site cached
  exec 9>"$venv.lock"
  flock 9
  # -I: not the current directory's build/ (a zpp build tree) as the package.
  if ! "$venv/bin/python" -I -c 'import build.__main__' 2>/dev/null; then
    echo "zpp setup-torch: installing build (PyPA's wheel builder) into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check build
  fi
  flock -u 9
  echo "zpp setup-torch: torch $version: a wheel from a clean copy of the tree ($log)"
  rm -rf "$src" "$out/dist" "$out/venv"
  mkdir -p "$src"
  if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$root" ls-files -z --cached --others --exclude-standard | (cd "$root" && tar --null -T - -cf -) |
      tar -xf - -C "$src"
  else # a tarball of the tree: everything but its build directories
    tar -C "$root" --exclude='./build*' --exclude='./python/build' -cf - . | tar -xf - -C "$src"
  fi
  if ! (cd "$src" && "$venv/bin/python" -m build --wheel --no-isolation --outdir "$out/dist" ./python) \
    >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "zpp setup-torch: building the torch_zpp wheel for torch $version failed (the whole log: $log)" >&2
    return 1
  fi
  rm -rf "$src" # the tree is gone: what follows runs from the wheel alone
  # Without a pip of its own: the cached environment's (and its setuptools,
  # which torch requires) come through the .pth, and install into this one.
  "$py" -m venv --without-pip "$out/venv"
  site=$("$out/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cached=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$cached" >"$site/zpp-cached-torch.pth"
  # Offline: its one dependency, torch==VERSION, must be the cached one.
  "$out/venv/bin/python" -m pip install -q --disable-pip-version-check --no-index "$out"/dist/*.whl
  echo "zpp setup-torch: installed $(basename "$out"/dist/*.whl) into $out/venv"
  {
    printf 'ZPP_TORCH_PYTHON=%q\n' "$out/venv/bin/python"
    printf 'ZPP_TORCH_SITE=\n'
  } >"$out/env.sh"
}

n=${#versions[@]}
for ((i = 0; i < n; i++)); do
  case ${ZPP_TORCH_WHEEL:-newest} in
    newest) ((i == n - 1)) && how=wheel || how=build ;;
    all) how=wheel ;;
    none) how=build ;;
    *) echo "zpp setup-torch: ZPP_TORCH_WHEEL is newest, all or none, not '$ZPP_TORCH_WHEEL'" >&2; exit 1 ;;
  esac
  # One version alone is built against build/ unless asked otherwise: a
  # developer's quick check (ZPP_TORCH_VERSION) should not build libzpp again.
  ((n == 1)) && [[ -z ${ZPP_TORCH_WHEEL:-} ]] && how=build
  setup "${versions[i]}" "$how"
done
# The benchmarks' environment: the first version's.
cp "$build/torch/${versions[0]}/env.sh" "$build/torch/env.sh"
