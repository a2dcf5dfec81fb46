#!/usr/bin/env bash
# Installs the Debian packages zpp builds and tests with, when they are
# missing. As root it installs them; otherwise it names them and stops.
# CUDA and NCCL are not Debian packages: they are used from /usr/local/cuda
# (or CUDA_HOME) when present and skipped otherwise.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ninja-build  # compiler and build (ninja: torch_zpp in parallel)
  libucx-dev ucx-utils               # host-memory transport
  libopenmpi-dev openmpi-bin         # mpirun launch and baselines
  libbenchmark-dev                   # micro-benchmarks
  iproute2 iperf3                    # emulated cluster (netns, tc)
  libjemalloc2                       # destroyed-handle tests under another allocator
  python3                            # JSON schema checks in tests
  python3-prometheus-client          # its parser checks zpp-health --prometheus
  python3-venv python3-dev           # torch's environment, torch_zpp's build
  slurmctld slurmd slurm-client munge  # srun tests (label slurm): a private Slurm, 3.3 MB
  gdb                                # a hung test rank's stacks, printed before it is killed
)

missing=()
for p in "${packages[@]}"; do
  [[ "$p" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "zpp setup: all Debian packages present"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "zpp setup: missing Debian packages: ${missing[*]}" >&2
  echo "zpp setup: run this as root, or have root run: apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "zpp setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
