#!/usr/bin/env bash
# Installs what the torch tests need beside torch into a torch environment of
# scripts/setup-torch.sh, once, if missing:
#   expecttest   torch.testing's test base imports it (tests/torch/pytorch_suite.py,
#                PyTorch's own distributed_test.py suite)
#   deepspeed    tests/torch/test_deepspeed.py, built without its ops
#                (DS_BUILD_OPS=0; the CPU accelerator needs none)
#   torchft      tests/torch/test_torchft.py (torch_zpp.torchft), with
#   parameterized  which torchft's own test module imports
# The versions are pinned (the tested ones). The environment's lock file is
# held meanwhile, as setup-torch.sh holds it, since checkouts share it.
#
#   setup-torch-extras.sh VENV_PYTHON [PACKAGE...]   (default: expecttest deepspeed)
# Exit 0 when present or installed, 1 with the reason when pip failed.
set -euo pipefail
py=$1
shift
wanted=("$@")
((${#wanted[@]} > 0)) || wanted=(expecttest deepspeed)
venv=$(cd "$(dirname "$py")/.." && pwd)
declare -A pin=([expecttest]=0.3.0 [deepspeed]=0.19.8 [torchft]=0.2.0 [parameterized]=0.9.0)

exec 9>"$venv.lock"
flock 9
for pkg in "${wanted[@]}"; do
  [[ -n "${pin[$pkg]:-}" ]] || { echo "setup-torch-extras: unknown package $pkg" >&2; exit 1; }
  have=$("$py" -c "import importlib.metadata as m; print(m.version('$pkg'))" 2>/dev/null || true)
  [[ "$have" == "${pin[$pkg]}" ]] && continue
  echo "zpp setup-torch-extras: installing $pkg==${pin[$pkg]} into $venv"
  # DeepSpeed's setup.py imports torch: build against the installed one.
  if ! DS_BUILD_OPS=0 DS_ACCELERATOR=cpu "$py" -m pip install -q --disable-pip-version-check \
    --no-build-isolation "$pkg==${pin[$pkg]}"; then
    echo "zpp setup-torch-extras: pip could not install $pkg==${pin[$pkg]} (no network?)" >&2
    exit 1
  fi
done
