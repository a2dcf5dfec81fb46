#!/usr/bin/env bash
# Runs a torch test with the environment scripts/setup-torch.sh made for this
# build and torch version: run.sh BUILD_DIR TORCH_VERSION SCRIPT ARGS... Exit
# 77 (skipped), saying why, where there is none.
set -euo pipefail
build=$1
version=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
env=$build/torch/$version/env.sh
if [[ ! -f "$env" ]]; then
  echo "SKIPPED: no torch $version environment for $build (scripts/setup-torch.sh makes it; scripts/test.sh runs it)"
  exit 77
fi
ZPP_TORCH_SKIP=
# shellcheck source=/dev/null # written by scripts/setup-torch.sh
source "$env"
if [[ -n "$ZPP_TORCH_SKIP" ]]; then
  echo "SKIPPED: $ZPP_TORCH_SKIP"
  exit 77
fi
# Empty where torch_zpp is installed in the environment (from a wheel).
if [[ -n "$ZPP_TORCH_SITE" ]]; then
  export PYTHONPATH=$ZPP_TORCH_SITE${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
# Four ranks on two cores: one compute thread each, or they fight.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec "$ZPP_TORCH_PYTHON" "$here/$1" "${@:2}"
