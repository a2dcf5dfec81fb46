"""How torch_zpp is installed, checked from the environment the other torch tests use.

- It was built for this torch (build_info()["torch"]).
- libzpp is the one it says: from a wheel (scripts/setup-torch.sh, the newest torch), the package's
  own copy beside _C, found through an rpath of $ORIGIN, and nothing of the checkout on the module
  path; from a developer's build, that build's library.
- Under another torch than the one it was built for, importing it fails with one line that names
  both versions and the fix, instead of an undefined symbol (checked by posing as another version:
  the check must come before _C is loaded, or this would load _C and pass).

    test_install.py
"""
import os
import subprocess
import sys


def fail(msg):
    print("FAIL " + msg, flush=True)
    sys.exit(1)


def main():
    import torch

    import torch_zpp

    info = torch_zpp.build_info()
    print("torch %s, torch_zpp from %s: %s" % (torch.__version__, os.path.dirname(torch_zpp.__file__), info))
    if info.get("torch") != torch.__version__:
        fail("torch_zpp records torch %r, this is %s" % (info.get("torch"), torch.__version__))
    loaded = info.get("libzpp")
    if not loaded:
        fail("no libzpp in this process's maps")
    package = os.path.dirname(os.path.realpath(torch_zpp.__file__))
    if info["zpp_lib"] == "bundled":
        if os.path.dirname(os.path.realpath(loaded)) != package:
            fail("the package carries libzpp, but %s was loaded" % loaded)
        checkout = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
        if package == os.path.join(checkout, "python", "torch_zpp"):
            fail("torch_zpp was imported from the checkout's python/, not from an installation")
        with open(os.path.join(package, "_C" + _ext_suffix()), "rb") as f:
            if b"$ORIGIN" not in f.read():
                fail("_C has no $ORIGIN rpath")
    elif os.path.dirname(os.path.realpath(loaded)) != os.path.realpath(info["zpp_lib"]):
        fail("built against %s, but %s was loaded" % (info["zpp_lib"], loaded))

    other = "0.0.1+other"
    probe = ("import torch; torch.__version__ = %r\n"
             "import torch_zpp\n" % other)
    r = subprocess.run([sys.executable, "-c", probe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    print("under torch %s: %s" % (other, last))
    if r.returncode == 0:
        fail("torch_zpp imported under a torch it was not built for")
    if not (last.startswith("ImportError: ") and torch.__version__ in last and other in last
            and "pip install" in last):
        fail("the error does not name both versions and the fix: %r" % last)
    print("PASS")


def _ext_suffix():
    import sysconfig
    return sysconfig.get_config_var("EXT_SUFFIX")


if __name__ == "__main__":
    main()
