"""run_all: the tests' members (trainer ranks, engine workers) called at
once, each on its own thread, as separate processes would run them."""

import threading
from typing import Callable, Sequence


def run_all(fns: Sequence[Callable[[], object]], timeout: float = 120.0) -> None:
    """Runs every fn at once and waits up to ``timeout`` seconds for each;
    re-raises the first error; raises AssertionError naming a hang."""
    errors = []

    def body(fn):
        try:
            fn()
        except BaseException as e:  # re-raised below, on the caller's thread
            errors.append(e)
    ts = [threading.Thread(target=body, args=(f,), daemon=True) for f in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    if any(t.is_alive() for t in ts):
        raise AssertionError("a rank hung")
    if errors:
        raise errors[0]
