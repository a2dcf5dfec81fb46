"""Builds torch_zpp: libzpp with this checkout's CMake, then torch_zpp._C against the installed torch.

    pip install --no-build-isolation ./python          # into the environment that has torch
    python -m build --wheel --no-isolation ./python    # a wheel for environments with that torch

By default libzpp (the library only: no tools, no tests) is configured and built from the checkout
around this directory into build_ext's temporary directory, with UCX required (the host transport;
CMake names its Debian package when it is missing) and MPI left out (torch_zpp never uses it). It is
copied into the package beside _C, which finds it through an rpath of $ORIGIN: the installed package
needs nothing from the checkout, so a wheel works with the tree gone. ZPP_CMAKE_ARGS adds configure
arguments (e.g. -DZPP_WITH_CUDA=OFF); a second build reuses the first's CMake tree.

Developers with a zpp build at hand name it instead: ZPP_HOME (an install prefix: include/zpp.h,
lib/libzpp.so) or ZPP_BUILD_DIR (a CMake build directory of this checkout). The extension then
links that libzpp with an rpath to it, nothing is copied, and the package follows that build:
rebuild it and torch_zpp uses the new library; delete it and torch_zpp cannot load.

The device path (CUDA tensors on zpp's NCCL path) is compiled in only when libzpp was built with
NCCL, torch has CUDA, and both use the same CUDA major version: two CUDA runtimes or two NCCLs of
different majors in one process is asking for trouble. It needs the CUDA runtime headers (the ones
torch's wheel brings, or CUDA_HOME's) but never nvcc. ZPP_TORCH_DEVICE=0 leaves it out, =1 makes its
absence an error, =force builds it despite different CUDA majors (to check that it compiles; do not
run it so).

The sources compile in parallel with ninja where it is installed (Debian: ninja-build), MAX_JOBS at
a time (default: the CPUs), as torch's BuildExtension does.
"""
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import setup

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:  # pip's isolated build: torch must come from the environment
    sys.exit("torch_zpp: torch is not importable; build with "
             "'pip install --no-build-isolation ./python' in the environment that has torch")

here = os.path.dirname(os.path.abspath(__file__))
checkout = os.path.dirname(here)
# torch_zpp/csrc/*.cpp, split as PyTorch's UCC backend is: the c10d::Backend's
# collectives and its life, the Python module, error feedback's residual, the
# Work, type and op conversions. Each file parses torch's headers (10-60 s):
# the largest come first, so that ninja's jobs end together.
SOURCES = ["collectives", "backend", "module", "grad_residual", "work", "conversions"]  # + compat.hpp
# The file name the loader looks for (libzpp's soname): what the package holds.
LIBZPP_SONAME = "libzpp.so.0"


class Zpp:
    """Where libzpp is: its header directory, its library directory, its CMake build
    directory (None for an install) and whether the package carries its own copy."""

    def __init__(self, include_dirs, lib_dir, build_dir, bundled):
        self.include_dirs, self.lib_dir, self.build_dir, self.bundled = include_dirs, lib_dir, build_dir, bundled


def run_cmake(args, what):
    """Runs cmake; on failure ends the build with CMake's own error lines (they name a missing
    dependency and its Debian package) after its whole output."""
    try:
        proc = subprocess.run(["cmake"] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except FileNotFoundError:
        sys.exit("torch_zpp: cmake is not installed (Debian: cmake); it builds libzpp")
    print(proc.stdout, end="")
    if proc.returncode != 0:
        # "CMake Error at FILE:LINE (message):" and the indented lines that follow it.
        errors, lines = [], proc.stdout.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("CMake Error"):
                msg = []
                for follow in lines[i + 1:]:
                    if not follow.startswith(" "):
                        break
                    msg.append(follow.strip())
                errors.append(" ".join(m for m in msg if m) or line)
        sys.exit("torch_zpp: %s failed: %s" % (what, " | ".join(errors) or "see CMake's output above"))


def build_libzpp(cmake_dir):
    """Configures and builds libzpp from the checkout into cmake_dir."""
    if not os.path.exists(os.path.join(checkout, "CMakeLists.txt")):
        sys.exit("torch_zpp: no zpp checkout around %s to build libzpp from; set ZPP_HOME or "
                 "ZPP_BUILD_DIR to a built zpp" % here)
    cache = os.path.join(cmake_dir, "CMakeCache.txt")
    if os.path.exists(cache):  # a tree configured for another checkout (a moved copy) starts over
        m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", open(cache).read(), re.M)
        if not m or os.path.realpath(m.group(1)) != os.path.realpath(checkout):
            shutil.rmtree(cmake_dir)
    os.makedirs(cmake_dir, exist_ok=True)
    print("torch_zpp: building libzpp with CMake from %s in %s" % (checkout, cmake_dir))
    extra = shlex.split(os.environ.get("ZPP_CMAKE_ARGS", ""))
    run_cmake(["-S", checkout, "-B", cmake_dir, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
               "-DZPP_BUILD_TESTS=OFF", "-DZPP_WITH_UCX=ON", "-DZPP_WITH_MPI=OFF",
               "-DZPP_WITH_BENCHMARK=OFF"] + extra, "configuring libzpp")
    jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 2)
    run_cmake(["--build", cmake_dir, "--target", "zpp", "-j", jobs], "building libzpp")
    return Zpp([os.path.join(cmake_dir, "include")], os.path.join(cmake_dir, "lib"), cmake_dir, True)


def find_zpp(build_temp):
    home = os.environ.get("ZPP_HOME")
    if home:
        home = os.path.abspath(home)
        return Zpp([os.path.join(home, "include")], os.path.join(home, "lib"), None, False)
    build = os.environ.get("ZPP_BUILD_DIR")
    if build:
        build = os.path.abspath(build)
        # zpp.h and the zpp_version.h it includes, as the build tree offers them.
        return Zpp([os.path.join(build, "include")], os.path.join(build, "lib"), build, False)
    return build_libzpp(os.path.join(os.path.abspath(build_temp), "zpp-cmake"))


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
        reason = ("libzpp was built without NCCL" if build is not None else
                  "ZPP_HOME has no build record that says libzpp's CUDA")
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
    if re.search(r"\bsupportsShrinking\s*\(", backend):
        found.append("ZPP_C10D_SHRINK")
    if re.search(r"\bregisterAbortHook\s*\(", backend):
        found.append("ZPP_C10D_ABORT_HOOKS")
    if re.search(r"\bget_reconfigure_handle\s*\(", backend):
        found.append("ZPP_C10D_RECONFIGURE")
    return found


def configure(ext, zpp):
    """Fills in the extension: zpp's headers and library, the c10d features, the device path.
    Returns what torch_zpp.build_info() reports."""
    if not any(os.path.exists(os.path.join(d, "zpp.h")) for d in zpp.include_dirs):
        sys.exit("torch_zpp: zpp.h not found in %s (set ZPP_HOME or ZPP_BUILD_DIR)" % zpp.include_dirs)
    if not glob.glob(os.path.join(zpp.lib_dir, "libzpp.so*")):
        sys.exit("torch_zpp: libzpp.so not found in %s (build zpp first, or set ZPP_HOME / "
                 "ZPP_BUILD_DIR)" % zpp.lib_dir)
    cuda_incs, no_device = device_path(zpp.build_dir)
    features = c10d_features()
    print("torch_zpp: torch %s, c10d features: %s" % (torch.__version__, " ".join(features) or "none"))
    ext.define_macros += [(f, "1") for f in features]
    ext.include_dirs += zpp.include_dirs
    ext.library_dirs.append(zpp.lib_dir)
    ext.libraries.append("zpp")
    # The bundled copy sits beside _C; a developer's build stays where it is.
    ext.extra_link_args.append("-Wl,-rpath," + ("$ORIGIN" if zpp.bundled else zpp.lib_dir))
    if cuda_incs:
        ext.define_macros.append(("ZPP_TORCH_CUDA", "1"))
        ext.libraries.append("c10_cuda")
        ext.include_dirs += cuda_incs
        print("torch_zpp: building with the device path (CUDA tensors on zpp's NCCL path)")
    else:
        print("torch_zpp: host memory only (%s)" % no_device)
    return {"zpp_lib": "bundled" if zpp.bundled else zpp.lib_dir, "device_path": bool(cuda_incs),
            "no_device_reason": no_device, "torch": torch.__version__, "c10d_features": features}


def strip_debug_info(path):
    """A package needs symbols, not DWARF: stripping it takes libzpp from 19 to 8.6 MB (the rest is
    mostly its CUDA kernels) and _C from 26 to 0.6 MB, the wheel from 15 to 2.8 MB. Left as it is
    where binutils' strip is missing."""
    if shutil.which("strip"):
        subprocess.run(["strip", "--strip-debug", path], check=True)


class BuildZppExtension(BuildExtension):
    """build_ext that first finds or builds libzpp, and leaves in the package, beside _C, the
    bundled libzpp and _build_info.json (read at import: the torch version check)."""

    def run(self):
        zpp = find_zpp(self.build_temp)
        info = configure(self.extensions[0], zpp)
        super().run()
        package_dir = os.path.dirname(self.get_ext_fullpath("torch_zpp._C"))
        if zpp.bundled:
            copy = os.path.join(package_dir, LIBZPP_SONAME)
            shutil.copy2(os.path.realpath(os.path.join(zpp.lib_dir, LIBZPP_SONAME)), copy)
            strip_debug_info(copy)
            strip_debug_info(self.get_ext_fullpath("torch_zpp._C"))
        with open(os.path.join(package_dir, "_build_info.json"), "w") as f:
            json.dump(info, f)


setup(
    ext_modules=[
        CppExtension(
            "torch_zpp._C",
            ["torch_zpp/csrc/%s.cpp" % f for f in SOURCES],
            # Relative, as setuptools wants (pip and build run setup.py from here).
            depends=[os.path.relpath(p, here) for p in glob.glob(os.path.join(here, "torch_zpp", "csrc", "*.hpp"))],
            # hidden: pybind11's own types are, and classes holding them must match.
            extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter", "-fvisibility=hidden"],
        )
    ],
    cmdclass={"build_ext": BuildZppExtension},
    # The torch it is built against, without a local tag (+cu128 and the like):
    # pip then knows that upgrading torch breaks it (the import check says how).
    install_requires=["torch==" + torch.__version__.split("+")[0]],
)
