"""Staged rounds for engine workers: weights arrive while the engine serves.

A staged engine member (``refit.Member(..., staged=True)``) receives each
round into a staging copy of its weights; its live weights change only in
``apply_round``, once every engine rank holds the round (docs/engines.md,
"Serving while weights arrive"). :class:`StagedRounds` runs the receiving
side on a thread of its own, so the engine keeps generating while round
N+1 travels, and :meth:`StagedRounds.apply` is the pause::

    rounds = refit.staged.StagedRounds(member)     # starts receiving
    ...                                            # generate with version N
    pause_generation()
    stats = rounds.apply(timeout=300)              # live <- staging, commit
    recompute_derived_tensors()
    resume_generation()                            # now version N+1
"""

import threading
from typing import Optional

import refit


class StagedRounds:
    """Receives every round refitd announces into ``member``'s staging, on
    a daemon thread, one round ahead of :meth:`apply`."""

    def __init__(self, member: "refit.Member", timeout: float = 3600.0) -> None:
        self._member = member
        self._timeout = timeout
        self._cv = threading.Condition()
        self._held: Optional[int] = None        # the round every rank holds
        self._error: Optional[BaseException] = None
        self._stop = False
        self.version = 0                        # the last round applied
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cv:
                # One round ahead at most: the next waits for this apply.
                self._cv.wait_for(lambda: self._held is None or self._stop)
                if self._stop:
                    return
            try:
                v = self._member.wait_for_round(timeout=self._timeout)
                self._member.receive_round(v, timeout=self._timeout)
            except refit.AbortedError:
                continue  # the live weights are as they were; wait for the next
            except BaseException as e:  # handed to apply()
                with self._cv:
                    self._error = e
                    self._cv.notify_all()
                return
            with self._cv:
                self._held = v
                self._cv.notify_all()

    def held(self) -> Optional[int]:
        """The round every engine rank holds in staging, not yet applied
        (None: none yet)."""
        with self._cv:
            return self._held

    def apply(self, version: Optional[int] = None,
              timeout: float = 300.0) -> "refit.RoundStats":
        """Waits (up to ``timeout``) until a round is held, ``version`` when
        given, writes it into the live weights and waits for the commit;
        returns the round's stats (``pause_seconds``). Raises RefitError:
        DEADLINE_EXCEEDED when no round is held in time, FAILED_PRECONDITION
        when the held round is another version, the receiving thread's
        error, or ABORTED from the apply (refitd then counts the engine
        torn)."""
        with self._cv:
            if not self._cv.wait_for(lambda: self._held is not None or
                                     self._error is not None, timeout):
                raise refit.DeadlineExceededError(f"no staged round within {timeout:g} s")
            if self._error is not None:
                raise self._error
            v = self._held
            if version is not None and v != version:
                raise refit.FailedPreconditionError(f"the staged round is version {v}, the "
                                          f"update asked for {version}")
        try:
            stats = self._member.apply_round(v, timeout=timeout)
            self.version = v
            return stats
        finally:
            with self._cv:
                self._held = None
                self._cv.notify_all()

    def close(self) -> None:
        """Stops receiving after the round in flight (the thread is a
        daemon: a process may exit without it)."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
