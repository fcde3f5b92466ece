"""A refitd process on 127.0.0.1 with a port of its choosing, for tests."""
import subprocess
import threading
import time


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
