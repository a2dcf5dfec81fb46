"""Builds torch_zpp._C against the installed torch and a built libzpp.

Where zpp is: ZPP_HOME (an install prefix: include/zpp.h, lib/libzpp.so) or
ZPP_BUILD_DIR (a CMake build directory of this checkout); by default the
checkout's build/ next to this directory. The extension links the shared
libzpp with an rpath to it, and uses only zpp.h.

The device path (CUDA tensors on zpp's NCCL path) is compiled in only when
libzpp was built with NCCL, torch has CUDA, and both use the same CUDA major
version: two CUDA runtimes or two NCCLs of different majors in one process is
asking for trouble. It needs the CUDA runtime headers (the ones torch's wheel
brings, or CUDA_HOME's) but never nvcc. ZPP_TORCH_DEVICE=0 leaves it out,
=1 makes its absence an error, =force builds it despite different CUDA majors
(to check that it compiles; do not run it so).
"""
import glob
import json
import os
import re
import sys

from setuptools import setup

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:  # pip's isolated build: torch must come from the environment
    sys.exit("torch_zpp: torch is not importable; build with "
             "'pip install --no-build-isolation ./python' in the environment that has torch")

here = os.path.dirname(os.path.abspath(__file__))
# torch_zpp/csrc/*.cpp, split as PyTorch's UCC backend is: type and op
# conversions, the Work, the c10d::Backend, the Python module.
SOURCES = ["conversions", "work", "backend", "module"]  # + compat.hpp: torch versions


def find_zpp():
    home = os.environ.get("ZPP_HOME")
    if home:
        inc, lib = os.path.join(home, "include"), os.path.join(home, "lib")
        return inc, lib, None
    build = os.path.abspath(os.environ.get("ZPP_BUILD_DIR", os.path.join(here, "..", "build")))
    return os.path.join(here, "..", "include"), os.path.join(build, "lib"), build


def zpp_cuda_major(build):
    """The CUDA major version libzpp was built with, None without NCCL."""
    if build is None:
        return None
    cfg = os.path.join(build, "generated", "zpp_build_config.h")
    try:
        text = open(cfg).read()
    except OSError:
        return None
    if not re.search(r"#define ZPP_HAVE_NCCL 1", text):
        return None
    try:
        cache = open(os.path.join(build, "CMakeCache.txt")).read()
        m = re.search(r"CMAKE_CUDA_COMPILER_VERSION:\w+=(\d+)", cache)
        if m:
            return int(m.group(1))
    except OSError:
        pass
    for cmakedir in glob.glob(os.path.join(build, "CMakeFiles", "*", "CMakeCUDACompiler.cmake")):
        m = re.search(r'CMAKE_CUDA_COMPILER_VERSION "(\d+)', open(cmakedir).read())
        if m:
            return int(m.group(1))
    return None


def cuda_headers(major):
    """Directories with cuda_runtime_api.h of CUDA `major`, or None."""
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    cands = []
    if spec is not None and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            cands.append(os.path.join(base, "cuda_runtime", "include"))
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    cands.append(os.path.join(home, "include"))
    for inc in cands:
        hdr = os.path.join(inc, "cuda_runtime_api.h")
        if not os.path.exists(hdr):
            continue
        m = re.search(r"#define CUDART_VERSION\s+(\d+)", open(hdr).read())
        if m and int(m.group(1)) // 1000 == major:
            return [inc]
    return None


def device_path(build):
    want = os.environ.get("ZPP_TORCH_DEVICE", "auto")
    if want == "0":
        return None, "ZPP_TORCH_DEVICE=0"
    reason, incs = None, None
    torch_major = int(torch.version.cuda.split(".")[0]) if torch.version.cuda else None
    zpp_major = zpp_cuda_major(build)
    if torch_major is None:
        reason = "this torch has no CUDA"
    elif zpp_major is None:
        reason = "libzpp was built without NCCL"
    elif zpp_major != torch_major and want != "force":
        reason = "torch uses CUDA %s, libzpp CUDA %d" % (torch.version.cuda, zpp_major)
    else:
        incs = cuda_headers(torch_major)
        if incs is None:
            reason = "no CUDA %d runtime headers found" % torch_major
    if reason and want == "1":
        sys.exit("torch_zpp: ZPP_TORCH_DEVICE=1 but the device path cannot be built: " + reason)
    return incs, reason


def c10d_features():
    """Macros for what the installed torch's c10d has (csrc/compat.hpp): read
    from its headers, since c10d has no version macro of its own for them."""
    inc = os.path.join(os.path.dirname(torch.__file__), "include", "torch", "csrc", "distributed", "c10d")

    def text(name):
        try:
            with open(os.path.join(inc, name)) as f:
                return f.read()
        except OSError:
            return ""

    backend, types = text("Backend.hpp"), text("Types.hpp")
    if not backend:
        sys.exit("torch_zpp: torch %s has no c10d headers in %s" % (torch.__version__, inc))
    found = []
    if re.search(r"\ball_gather_single\s*\(", backend) and re.search(r"\ball_to_all_single\s*\(", backend):
        found.append("ZPP_C10D_SINGLE_NAMES")
    if re.search(r"\bgather_single\s*\(", backend):
        found.append("ZPP_C10D_GATHER_SINGLE")
    if re.search(r"\bstruct\s+PreMulSumSupplement\b", types):
        found.append("ZPP_C10D_PREMUL_SUM")
    return found


zpp_inc, zpp_lib, zpp_build = find_zpp()
if not os.path.exists(os.path.join(zpp_inc, "zpp.h")):
    sys.exit("torch_zpp: zpp.h not found in %s (set ZPP_HOME or ZPP_BUILD_DIR)" % zpp_inc)
if not glob.glob(os.path.join(zpp_lib, "libzpp.so*")):
    sys.exit("torch_zpp: libzpp.so not found in %s (build zpp first, or set ZPP_HOME / "
             "ZPP_BUILD_DIR)" % zpp_lib)

cuda_incs, no_device = device_path(zpp_build)
features = c10d_features()
print("torch_zpp: torch %s, c10d features: %s" % (torch.__version__, " ".join(features) or "none"))
defines, libraries, include_dirs = [(f, "1") for f in features], ["zpp"], [os.path.abspath(zpp_inc)]
if zpp_build is not None:
    # zpp.h includes zpp_version.h, which the build generates into
    # build/include/ (an install puts both in include/).
    include_dirs.append(os.path.join(zpp_build, "include"))
if cuda_incs:
    defines.append(("ZPP_TORCH_CUDA", "1"))
    libraries.append("c10_cuda")
    include_dirs += cuda_incs
    print("torch_zpp: building with the device path (CUDA tensors on zpp's NCCL path)")
else:
    print("torch_zpp: host memory only (%s)" % no_device)

# Recorded for torch_zpp.build_info(): where libzpp is and why a path is off.
info = {"zpp_lib": os.path.abspath(zpp_lib), "device_path": bool(cuda_incs),
        "no_device_reason": no_device, "torch": torch.__version__, "c10d_features": features}
with open(os.path.join(here, "torch_zpp", "_build_info.json"), "w") as f:
    json.dump(info, f)

setup(
    ext_modules=[
        CppExtension(
            "torch_zpp._C",
            ["torch_zpp/csrc/%s.cpp" % f for f in SOURCES],
            depends=glob.glob(os.path.join(here, "torch_zpp", "csrc", "*.hpp")),
            include_dirs=include_dirs,
            library_dirs=[os.path.abspath(zpp_lib)],
            libraries=libraries,
            define_macros=defines,
            # hidden: pybind11's own types are, and classes holding them must match.
            extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter", "-fvisibility=hidden"],
            extra_link_args=["-Wl,-rpath," + os.path.abspath(zpp_lib)],
        )
    ],
    package_data={"torch_zpp": ["_build_info.json"]},
    # ninja compiles the four sources at once (MAX_JOBS) where it is installed and
    # ZPP_TORCH_NINJA=1 asks for it (scripts/gpu-check.sh); the default stays serial.
    cmdclass={"build_ext": BuildExtension.with_options(
        use_ninja=os.environ.get("ZPP_TORCH_NINJA") == "1")},
)
