#!/usr/bin/env bash
# The GPU checks (issue 15) in one command, for a session lent a GPU machine
# through the `device` tool, which has CUDA, PyTorch and its NCCL but no
# Debian packages and nothing to fetch: build here, carry, run there.
#
#   bash scripts/gpu-check.sh prepare   # here: build into .device/build (CUDA on,
#                                       # MPI off) and copy the programs and the
#                                       # libraries the GPU machine lacks (UCX,
#                                       # Google Benchmark, the CUDA runtime) to .device/
#   bash scripts/gpu-check.sh run       # there, with carry [".device"]: versions,
#                                       # the gpu tests, compute-sanitizer, kernel speed,
#                                       # zpp-perf and zpp-health on device buffers;
#                                       # logs and JSON under $OUT (or .device/out)
#
# NCCL is the GPU machine's own (PyTorch's nvidia-nccl wheel): libnccl is too
# large to carry (the tree that travels is 64 MiB at most) and keeps its ABI
# (soname libnccl.so.2). Several ranks on one GPU need NCCL 2.30+ with
# NCCL_MULTI_RANK_GPU_ENABLE=1; `run` says which NCCL it found and runs the
# multi-rank steps only where that holds.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=.device
progs=(test_quant_cuda test_coll_gpu test_zeropp_gpu test_zeropp_gpu_overlap zpp-perf zpp-health zpp-bench-kernels zpp-info)

prepare() {
  cmake -S . -B "$dev/build" -DCMAKE_BUILD_TYPE=Release -DZPP_WITH_CUDA=ON -DZPP_WITH_MPI=OFF \
    -DZPP_WITH_UCX=ON >"$dev/cmake.log"
  cmake --build "$dev/build" -j"$(nproc)" --target "${progs[@]}" >"$dev/build.log" ||
    { tail -30 "$dev/build.log"; exit 1; }
  rm -rf "${dev:?}/bin" "${dev:?}/lib"
  mkdir -p "$dev/bin" "$dev/lib"
  for p in "${progs[@]}"; do
    [[ -x $dev/build/bin/$p ]] || { echo "gpu-check: $p was not built" >&2; exit 1; }
    cp "$dev/build/bin/$p" "$dev/bin/"
    strip --strip-debug "$dev/bin/$p"
  done
  # Whatever the programs load from Debian's UCX, Google Benchmark and the
  # CUDA runtime, plus UCX's transport modules (loaded at run time).
  local lib
  for lib in $(ldd "$dev"/bin/* | awk '/=> \// { print $3 }' | grep -E 'libuc[mpst]|libbenchmark|libcudart|libnuma' |
    sort -u); do
    cp -Lf "$lib" "$dev/lib/$(basename "$lib")" # one copy per name (two runtimes may be found)
  done
  cp -rL /usr/lib/x86_64-linux-gnu/ucx "$dev/lib/ucx"
  rm -f "$dev"/lib/ucx/*.a
  du -sh "$dev/bin" "$dev/lib"
  echo "gpu-check: ready; on the GPU machine: bash scripts/gpu-check.sh run (carry .device)"
}

run() {
  local out=${OUT:-$dev/out} bin=$dev/bin
  mkdir -p "$out"
  # PyTorch's NCCL, then what we carried (the CUDA runtime from the toolkit wins
  # when it is there).
  local nccl
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null || true)
  export LD_LIBRARY_PATH=${nccl:+$nccl:}/usr/local/cuda/lib64:$PWD/$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export UCX_MODULE_DIR=$PWD/$dev/lib/ucx
  {
    echo "== versions"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    nvcc --version | tail -2 || true
    echo "NCCL library dir: ${nccl:-none found}"
    "$bin/zpp-info" | head -20 || true
  } 2>&1 | tee "$out/versions.txt"
  local ncclVersion
  ncclVersion=$(python3 -c 'import torch; v = torch.cuda.nccl.version(); print(v[0] * 10000 + v[1] * 100 + v[2])' \
    2>/dev/null || echo 0)
  echo "NCCL version code (PyTorch's): $ncclVersion" | tee -a "$out/versions.txt"
  local status=0
  step() { # name command...: runs it, logs it, remembers a failure
    local name=$1
    shift
    echo "== $name: $*"
    if "$@" >"$out/$name.log" 2>&1; then echo "   ok"; else
      local rc=$?
      echo "   FAILED (exit $rc); last lines:"
      tail -15 "$out/$name.log"
      status=1
    fi
  }
  export ZPP_PIPELINE_CHUNK_BYTES=4096 ZPP_TIMEOUT=60
  step quant_cuda "$bin/test_quant_cuda"
  local tool
  for tool in memcheck racecheck synccheck initcheck; do
    step "$tool" sh tests/gpu/run_sanitized.sh compute-sanitizer "$tool" "$bin/test_quant_cuda" --quick
  done
  step coll_gpu "$bin/test_coll_gpu"
  if ((ncclVersion >= 23000)); then export NCCL_MULTI_RANK_GPU_ENABLE=1; fi
  step zeropp_gpu "$bin/test_zeropp_gpu"
  step overlap "$bin/test_zeropp_gpu_overlap"
  unset ZPP_PIPELINE_CHUNK_BYTES
  step bench_kernels "$bin/zpp-bench-kernels" --benchmark_filter='/cuda/|d2d_copy' \
    --benchmark_min_time=0.2 --benchmark_out="$out/bench-kernels.json" --benchmark_out_format=json
  step perf_device_1 "$bin/zpp-perf" --device -t allgather,reducescatter -m plain,qwz,qgz \
    -d bfloat16 -b 1M -e 256M -f 4 -n 10 -w 2 -c 1 -J "$out/perf-device-1rank.json"
  if ((ncclVersion >= 23000)); then
    step perf_device_2x2 "$bin/zpp-perf" -N 4 --layout 2x2 --device -t allgather,reducescatter \
      -m plain,qwz,qgz -d bfloat16 -b 1M -e 64M -f 4 -n 5 -w 1 -c 1 -J "$out/perf-device-2x2.json"
    step perf_device_2x2_cyclic "$bin/zpp-perf" -N 4 --layout 2x2/cyclic --device -t reducescatter \
      -m plain,qgz -d bfloat16 -b 64M -e 64M -n 5 -w 1 -c 1 -J "$out/perf-device-2x2-cyclic.json"
    step health_device "$bin/zpp-health" -N 4 --layout 2x2 --device -s 64M --trials 2 \
      -J "$out/health-device.json"
  else
    echo "== multi-rank steps skipped: NCCL $ncclVersion is older than 2.30 (one rank per GPU only)"
  fi
  echo "gpu-check: $([[ $status == 0 ]] && echo all steps passed || echo some steps FAILED); logs in $out"
  return "$status"
}

case ${1:-} in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
