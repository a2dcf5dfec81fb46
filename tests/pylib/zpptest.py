"""A MASTER_PORT for tests that launch ranks from the environment.

zpp's environment launch listens on MASTER_PORT + 1 (ZPP_MASTER_PORT_OFFSET)
and the tools may use MASTER_PORT itself. Both are picked below the kernel's
ephemeral port range: a port inside it can be handed to any client socket
(UCX, another test's bootstrap) between the check and the listen, which made
tests fail now and then with "Address already in use" under ctest -j.
"""
import random
import socket


def _bindable(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_master_port():
    lo = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = random.Random()
    if lo > 12000:
        for _ in range(200):
            port = rng.randrange(10000, lo - 2)
            if _bindable(port) and _bindable(port + 1):
                return port
    raise RuntimeError("no free pair of ports below the ephemeral range %d" % lo)
