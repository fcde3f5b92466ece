"""A refitd process on 127.0.0.1 with a port of its choosing, for tests."""
import random
import socket
import subprocess
import threading
import time


def restartable_port() -> int:
    """A port on 127.0.0.1 that binds now and lies below the kernel's
    ephemeral range, which every process draws port 0 and the local end of
    each outgoing connection from: no other test takes it while a refitd
    stopped there is down, so one can start there again.
    Raises RuntimeError when 64 random tries found none free."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            high = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        high = 32768
    if high <= 10000:
        high = 32768
    for _ in range(64):
        port = random.randrange(10000, high)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError(f"no free port on 127.0.0.1 in [10000, {high}) after 64 tries")


class Refitd:
    """Starts ``refitd`` with ``flags``; ``address`` once it listens.
    Raises RuntimeError when it does not report its port within 30 s."""

    def __init__(self, binary: str, *flags: str, port: int = 0):
        self.p = subprocess.Popen([binary, f"--address=127.0.0.1:{port}", *flags],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.port = None
        until = time.time() + 30
        while time.time() < until:
            line = self.p.stdout.readline()
            if not line:
                break
            if "listening on port " in line:
                self.port = int(line.rsplit(" ", 1)[1])
                break
        if self.port is None:
            self.p.kill()
            raise RuntimeError("refitd did not report its port")
        self.address = f"127.0.0.1:{self.port}"
        self.log = []
        # Keep reading its log, or a full pipe would block refitd.
        self._drain = threading.Thread(target=lambda: self.log.extend(self.p.stdout),
                                       daemon=True)
        self._drain.start()

    def stop(self) -> None:
        self.p.kill()
        self.p.wait(timeout=10)
        self._drain.join(10)
        self.p.stdout.close()
