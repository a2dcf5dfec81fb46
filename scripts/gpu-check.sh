#!/usr/bin/env bash
# The GPU checks (issue 15) in one command, for a session lent a GPU machine
# through the `device` tool, which has CUDA, PyTorch and its NCCL but no
# Debian packages and nothing to fetch: build here, carry, run there.
#
#   bash scripts/gpu-check.sh prepare   # here: build into .device/build (CUDA on,
#                                       # sm_90, MPI off) and copy the programs and the
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
# What travels (the device tool's carry): never .device/build, which is too large.
carry=("$dev/bin" "$dev/lib" "$dev/zpp")

# The GPU code: sm_90's SASS alone by default (H100 and H200, the machines the
# device tool lends). The default build's four images (sm_80 and sm_90, each
# SASS and PTX) make the programs 9 MiB each, 76 MiB to carry in all: more
# than the 64 MiB that travels.
arch=${ZPP_GPU_CHECK_ARCH:-90-real}
carryLimitMiB=60 # of the 64 that travel: the tree itself is about 4

prepare() {
  mkdir -p "$dev" # a fresh clone has none: its logs go there first
  cmake -S . -B "$dev/build" -DCMAKE_BUILD_TYPE=Release -DZPP_WITH_CUDA=ON -DZPP_WITH_MPI=OFF \
    -DZPP_WITH_UCX=ON -DZPP_CUDA_ARCHITECTURES="$arch" >"$dev/cmake.log"
  cmake --build "$dev/build" -j"$(nproc)" --target "${progs[@]}" zpp >"$dev/build.log" ||
    { tail -30 "$dev/build.log"; exit 1; }
  rm -rf "${dev:?}/bin" "${dev:?}/lib" "${dev:?}/zpp"
  mkdir -p "$dev/bin" "$dev/lib" "$dev/zpp/lib" "$dev/zpp/include" "$dev/zpp/generated"
  for p in "${progs[@]}"; do
    [[ -x $dev/build/bin/$p ]] || {
      echo "gpu-check: $p was not built: $dev/cmake.log says which dependency was missing" \
        "(bash scripts/setup-deps.sh installs them)" >&2
      exit 1
    }
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
  # What python/setup.py reads from a build directory to build torch_zpp
  # there, against the GPU machine's PyTorch, with the device path.
  cp -P "$dev"/build/lib/libzpp.so* "$dev/zpp/lib/"
  strip --strip-debug "$dev"/zpp/lib/libzpp.so.*.*
  cp "$dev"/build/include/zpp_version.h "$dev/zpp/include/"
  cp "$dev"/build/generated/zpp_build_config.h "$dev/zpp/generated/"
  mkdir -p "$dev/zpp/CMakeFiles/cuda" # where setup.py reads the CUDA version
  cp "$dev"/build/CMakeFiles/*/CMakeCUDACompiler.cmake "$dev/zpp/CMakeFiles/cuda/"
  echo "$arch" >"$dev/bin/cuda-arch" # what run checks the GPU against
  du -sh "${carry[@]}"
  local mib
  mib=$(du -scm "${carry[@]}" | awk 'END { print $1 }')
  if ((mib > carryLimitMiB)); then
    echo "gpu-check: what must travel is $mib MiB, more than $carryLimitMiB; build fewer CUDA" \
      "architectures (ZPP_GPU_CHECK_ARCH, now $arch)" >&2
    exit 1
  fi
  echo "gpu-check: ready; on the GPU machine: bash scripts/gpu-check.sh run" \
    "(carry $(printf '"%s", ' "${carry[@]}" | sed 's/, $//'))"
}

# archRuns CC ARCHS: whether code built for CMake's CUDA architectures ARCHS
# ("90-real", "80;90") runs on compute capability CC (90): SASS of CC itself,
# or PTX (a plain or -virtual entry) of CC or below, which the driver compiles.
archRuns() {
  local a n
  for a in ${2//;/ }; do
    n=${a%%-*}
    [[ $n == "$1" ]] && return 0
    [[ $a != *-real ]] && ((n <= $1)) && return 0
  done
  return 1
}

run() {
  # $OUT takes at most 8 files back: every log goes to $logs, packed at the
  # end into one archive; the summary is printed. The whole run keeps within
  # ZPP_GPU_CHECK_BUDGET seconds (each step's limit is cut to what is left),
  # so the archive is always written before the device tool's own limit.
  local out=${OUT:-$dev/out} bin=$dev/bin logs=/tmp/zpp-gpu-check
  local budget=${ZPP_GPU_CHECK_BUDGET:-400} start=$SECONDS
  rm -rf "$logs"
  mkdir -p "$out" "$logs"
  trap 'tar czf "'"$out"'/gpu-check.tgz" -C "'"$logs"'" . 2>/dev/null' EXIT
  # NCCL: the machine's own, from PyTorch's nvidia wheel; then what we carried
  # (the CUDA runtime from the toolkit wins when it is there).
  local nccl
  nccl=$(python3 -c '
import glob, os, sys
for p in sys.path:
    for f in sorted(glob.glob(os.path.join(p, "nvidia", "**", "libnccl.so.2"), recursive=True)):
        print(os.path.dirname(f))
        sys.exit()' 2>/dev/null || true)
  export LD_LIBRARY_PATH=${nccl:+$nccl:}/usr/local/cuda/lib64:$PWD/$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export UCX_MODULE_DIR=$PWD/$dev/lib/ucx
  local ncclVersion
  ncclVersion=$(python3 -c 'import torch; v = torch.cuda.nccl.version(); print(v[0] * 10000 + v[1] * 100 + v[2])' \
    2>/dev/null || echo 0)
  {
    echo "== versions"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
    nvcc --version | tail -2 || true
    python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", torch.cuda.nccl.version())' || true
    echo "NCCL library dir: ${nccl:-none found}; version code $ncclVersion"
    "$bin/zpp-info" | head -20 || true
  } 2>&1 | tee "$logs/versions.txt"
  # A GPU the carried code has no image for fails every launch: say it once.
  local cc built
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ' || true)
  built=$(cat "$bin/cuda-arch" 2>/dev/null || true)
  if [[ -n $cc && -n $built ]] && ! archRuns "$cc" "$built"; then
    echo "gpu-check: this GPU is sm_$cc and the programs carry code for '$built' only;" \
      "prepare again with ZPP_GPU_CHECK_ARCH=$cc-real"
    return 1
  fi

  # torch_zpp against this machine's PyTorch, built while the GPU steps run.
  (cd python && ZPP_BUILD_DIR=$PWD/../$dev/zpp ZPP_TORCH_DEVICE=1 MAX_JOBS=8 python3 setup.py build_ext --inplace) \
    >"$logs/torch-build.log" 2>&1 &
  local torchBuild=$!

  local status=0
  step() { # name seconds command...: runs it within its time, logs it, remembers a failure
    local name=$1 limit=$2 left=$((budget - (SECONDS - start)))
    shift 2
    # ZPP_GPU_CHECK_STEPS="a b ...": only those steps (a second run after fixes)
    if [[ -n ${ZPP_GPU_CHECK_STEPS:-} && " $ZPP_GPU_CHECK_STEPS " != *" $name "* ]]; then return; fi
    ((limit > left)) && limit=$left
    if ((limit < 5)); then
      echo "== $name: not run (the run's budget is spent)"
      status=1
      return
    fi
    local t=$SECONDS rc=0
    timeout -k 5 "$limit" "$@" >"$logs/$name.log" 2>&1 || rc=$?
    if ((rc == 0)); then echo "== $name: ok ($((SECONDS - t)) s)"; else
      echo "== $name: FAILED (exit $rc$( ((rc == 124)) && echo ", out of its $limit s"), $((SECONDS - t)) s): $*"
      tail -25 "$logs/$name.log"
      status=1
    fi
  }
  export ZPP_TIMEOUT=60
  if ((ncclVersion >= 23000)); then
    export NCCL_MULTI_RANK_GPU_ENABLE=1
  else # each rank a host of its own to NCCL (perf/common/launch.c)
    export ZPP_LAUNCH_NCCL_HOST_PER_RANK=1
  fi
  ZPP_PIPELINE_CHUNK_BYTES=4096 step quant_cuda 90 "$bin/test_quant_cuda"
  step bench_kernels 140 "$bin/zpp-bench-kernels" --benchmark_filter='/cuda/|d2d_copy' \
    --benchmark_min_time=0.05 --benchmark_out="$logs/bench-kernels.json" --benchmark_out_format=json
  cp "$logs/bench-kernels.json" "$out/" 2>/dev/null || true
  ZPP_PIPELINE_CHUNK_BYTES=4096 step overlap 30 "$bin/test_zeropp_gpu_overlap"
  # compute-sanitizer is slow and mostly on the CPU: the four tools at once,
  # beside the steps below (whose timings do not matter).
  local san tool sans=()
  san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck initcheck; do
    step "$tool" 240 sh tests/gpu/run_sanitized.sh "$san" "$tool" "$bin/test_quant_cuda" --quick \
      >"$logs/$tool.summary" 2>&1 &
    sans+=($!)
  done
  ZPP_PIPELINE_CHUNK_BYTES=4096 step coll_gpu 150 "$bin/test_coll_gpu"
  ZPP_PIPELINE_CHUNK_BYTES=4096 step zeropp_gpu 200 "$bin/test_zeropp_gpu"
  step perf_device_1 60 "$bin/zpp-perf" --device -t allgather,reducescatter -m plain,qwz,qgz \
    -d bfloat16 -b 1M -e 256M -f 4 -n 10 -w 2 -c 1 -J "$logs/perf-device-1rank.json"
  step perf_device_2x2 90 "$bin/zpp-perf" -N 4 --layout 2x2 --device -t allgather,reducescatter \
    -m plain,qwz,qgz -d bfloat16 -b 1M -e 64M -f 4 -n 5 -w 1 -c 1 -J "$logs/perf-device-2x2.json"
  step health_device 60 "$bin/zpp-health" -N 4 --layout 2x2 --device -s 64M --trials 2 \
    -J "$logs/health-device.json"
  echo "== torch_zpp build: waiting"
  if [[ -n ${ZPP_GPU_CHECK_STEPS:-} && " $ZPP_GPU_CHECK_STEPS " != *" torch_cuda "* ]]; then
    echo "   not needed"
  elif wait "$torchBuild"; then
    echo "   built: $(grep -h 'torch_zpp:' "$logs/torch-build.log" | tr '\n' ' ')"
    PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 step torch_cuda 200 python3 tests/torch/test_cuda.py 2x2
  else
    echo "== torch_zpp build FAILED:"
    tail -30 "$logs/torch-build.log"
    status=1
  fi
  local pid
  for pid in "${sans[@]}"; do wait "$pid" || true; done
  # Where the codecs spend their time: ncu's speed-of-light of the 64 MiB
  # bf16 int4 codecs, plain and rotated, and qgZ's reductions, plain and in
  # qgZ's order on rotated inputs (a profile, not a pass or fail). Every call
  # also runs escapeKernel, and the inputs' quantizations launch kernels
  # before the timed ones: two launches of each kernel and launch shape
  # (per-launch-config), so that no kernel uses up the count of the others.
  local ncu ncuFilter='^(de)?quantize(-rotated)?/cuda/bf16/int4/64MiB|^reduce_requant(-rot-direct)?/cuda/int(4x8|8x8-int4)/64MiB'
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  step ncu 120 "$ncu" --section SpeedOfLight --section Occupancy --section LaunchStats \
    --filter-mode per-launch-config --launch-count 2 \
    -k 'regex:quantizeKernel|decodeKernel|rotateKernel|rotDecodeKernel|reduceRequantKernel|escapeKernel|sumKernel|requantKernel' \
    "$bin/zpp-bench-kernels" --benchmark_min_time=0.001 --benchmark_filter="${ZPP_GPU_CHECK_NCU_FILTER:-$ncuFilter}"
  cat "$logs"/*.summary
  if grep -q "FAILED\|not run" "$logs"/*.summary; then status=1; fi
  echo "gpu-check: $([[ $status == 0 ]] && echo all steps passed || echo some steps FAILED)" \
    "in $((SECONDS - start)) s; logs in $out/gpu-check.tgz"
  return "$status"
}

case ${1:-} in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
