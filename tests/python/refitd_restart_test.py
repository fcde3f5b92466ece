"""A trainer and an engine living through refitd going away and their own
runs starting again, with a real refitd:

- start_round fails with UnavailableError naming refitd's address within
  the connect timeout (not DeadlineExceededError at its own timeout), the
  README's recovery loop catches it, and rounds go on once refitd is back
  on its address;
- a run that starts again from scratch with ``start_round()`` (no version)
  gets the next version, and a resumed run that names its versions keeps
  them monotonic (a version below the last is refused, saying what to do);
- a round over a second reports progress to run_round's callback each
  second.

  refitd_restart_test.py REFITD LIBREFIT_CLIENT_SO README.md
"""
import contextlib
import io
import os
import re
import sys
import threading
import time
import unittest

REFITD, LIB, README = (os.path.abspath(p) for p in sys.argv[1:4])
del sys.argv[1:4]
os.environ["REFIT_CLIENT_LIB"] = LIB
import refit  # noqa: E402  (after REFIT_CLIENT_LIB is set)
import refitd_process  # noqa: E402

MODEL, TRAINER, ENGINE = "tiny-qwen3", "megatron:tp=1", "vllm:tp=1"


def buffers(side, convention, fill=0):
    want = refit.expected_buffers(side=side, rank=0, model=MODEL, convention=convention)
    return {b.name: bytearray([fill]) * b.nbytes for b in want}


def readme_recovery_errors():
    """The exception classes the README's Python loop answers with
    ``m.rejoin()``, read from the README itself."""
    text = open(README).read()
    m = re.search(r"except \(([^)]*)\):\s*\n\s*m\.rejoin\(\)", text)
    if m is None:
        raise AssertionError("README.md: no `except (...): m.rejoin()` in its Python loop")
    return tuple(getattr(refit, name.strip().split(".")[1]) for name in m.group(1).split(","))


class EngineLoop:
    """The README's engine loop in a thread (with short timeouts, and a
    stop): every committed version lands in ``committed``."""

    def __init__(self, m):
        self.m, self.committed, self.stop = m, [], threading.Event()
        self.recovery = readme_recovery_errors()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        m = self.m
        while not self.stop.is_set():
            try:
                if m.plan_changed():
                    m.prepare(timeout=60)
                v = m.wait_for_round(timeout=0.5)
                m.run_round(v, timeout=60)
                self.committed.append(v)
            except refit.DeadlineExceededError:
                continue
            except refit.AbortedError:
                pass
            except self.recovery:
                m.rejoin(timeout=60)
                m.prepare(timeout=60)

    def join(self):
        self.stop.set()
        self.thread.join(30)


def trainer_round(t, version=None):
    """Rank 0 starts `version` (the next one when None) and runs it;
    returns the version."""
    v = t.start_round(version, timeout=30)
    got = t.wait_for_round(timeout=30)
    assert got == v, (got, v)
    t.run_round(v, timeout=60)
    return v


class RefitdRestartTest(unittest.TestCase):

    def test_start_round_fails_fast_and_the_readme_loop_recovers(self):
        # Below the ephemeral range: no other test takes it while refitd is down.
        d = refitd_process.Refitd(REFITD, port=refitd_process.restartable_port())
        port = d.port
        t = refit.Member(server=d.address, side="trainer", rank=0, model=MODEL,
                         convention=TRAINER, buffers=buffers("trainer", TRAINER, 7))
        engine_bufs = buffers("engine", ENGINE)
        e = refit.Member(server=d.address, side="engine", engine_id="e0", rank=0,
                         model=MODEL, convention=ENGINE, buffers=engine_bufs)
        loop = None
        try:
            t.prepare(timeout=30)
            e.prepare(timeout=30)
            loop = EngineLoop(e)
            self.assertEqual(trainer_round(t, 1), 1)
            until = time.time() + 30
            while 1 not in loop.committed and time.time() < until:
                time.sleep(0.05)
            # What the engine holds (the trainer's 7s; padding stays 0).
            round1 = {n: bytes(b) for n, b in engine_bufs.items()}
            self.assertTrue(any(7 in b for b in round1.values()))
            d.stop()  # refitd killed
            t0 = time.time()
            with self.assertRaises(refit.RefitError) as cm:
                t.start_round(2, timeout=60)
            took = time.time() - t0
            self.assertIsInstance(cm.exception, refit.UnavailableError, cm.exception)
            self.assertIsInstance(cm.exception, loop.recovery)  # the README's loop catches it
            self.assertIn(f"refitd at {d.address}", cm.exception.message)
            self.assertLess(took, 4.0, cm.exception)
            print(f"start_round with refitd gone: {took:.2f} s: {cm.exception}")
            # refitd back on its address: the trainer rejoins as the
            # README's loop does, and the engine's loop has rejoined.
            d = refitd_process.Refitd(REFITD, port=port)
            t.rejoin(timeout=60)
            t.prepare(timeout=60)
            for b in engine_bufs.values():
                b[:] = bytes(len(b))
            self.assertEqual(trainer_round(t, 2), 2)
            until = time.time() + 30
            while 2 not in loop.committed and time.time() < until:
                time.sleep(0.05)
            self.assertEqual(loop.committed, [1, 2])
            self.assertEqual({n: bytes(b) for n, b in engine_bufs.items()}, round1)
        finally:
            if loop is not None:
                loop.join()
            t.close()
            e.close()
            d.stop()

    def test_versions_survive_a_restarted_run_and_stay_monotonic(self):
        d = refitd_process.Refitd(REFITD)
        try:
            versions = []
            for run in range(2):  # the same program, started twice
                with refit.Member(server=d.address, side="trainer", rank=0, model=MODEL,
                                  convention=TRAINER,
                                  buffers=buffers("trainer", TRAINER)) as t, \
                     refit.Member(server=d.address, side="engine", engine_id="e0", rank=0,
                                  model=MODEL, convention=ENGINE,
                                  buffers=buffers("engine", ENGINE)) as e:
                    t.prepare(timeout=30)
                    e.prepare(timeout=30)
                    loop = EngineLoop(e)
                    try:
                        for _ in range(2):  # steps 1 and 2 of this run
                            versions.append(trainer_round(t))
                        if run == 1:
                            # A resumed run naming its versions: above the
                            # last one goes, below it is refused with advice.
                            versions.append(trainer_round(t, 10))
                            with self.assertRaises(refit.InvalidArgumentError) as cm:
                                t.start_round(3, timeout=10)
                            self.assertIn("start at 11", cm.exception.message)
                            self.assertIn("start_round()", cm.exception.message)
                            versions.append(trainer_round(t))
                    finally:
                        loop.join()
                    self.assertEqual(loop.committed, versions[-len(loop.committed):])
            self.assertEqual(versions, [1, 2, 3, 4, 10, 11])
        finally:
            d.stop()


class ProgressTest(unittest.TestCase):

    def test_a_round_over_a_second_reports_progress_each_second(self):
        d = refitd_process.Refitd(REFITD)
        try:
            with refit.Member(server=d.address, side="trainer", rank=0, model=MODEL,
                              convention=TRAINER, buffers=buffers("trainer", TRAINER)) as t, \
                 refit.Member(server=d.address, side="engine", engine_id="e0", rank=0,
                              model=MODEL, convention=ENGINE,
                              buffers=buffers("engine", ENGINE)) as e:
                t.prepare(timeout=30)
                e.prepare(timeout=30)
                v = t.start_round()
                self.assertEqual(e.wait_for_round(timeout=30), v)
                # The engine joins the round 2.5 s late: the trainer's round
                # runs that long, and says so each second.
                late = threading.Timer(2.5, lambda: e.run_round(v, timeout=60, progress=None))
                late.start()
                seen = []
                t0 = time.time()
                self.assertEqual(t.wait_for_round(timeout=30), v)
                t.run_round(v, timeout=60, progress=seen.append)
                late.join()
                took = time.time() - t0
            self.assertGreaterEqual(len(seen), 1, took)
            self.assertLessEqual(len(seen), int(took) + 1)
            for p in seen:
                self.assertIsInstance(p, refit.RoundProgress)
                self.assertEqual((p.version, p.running, p.members), (v, True, 2))
                self.assertEqual(p.member, "trainer rank 0")
                # The bytes so far, against the plan: the one engine rank
                # receives everything the one trainer rank sends.
                self.assertGreater(p.planned_bytes, 0)
                self.assertEqual(p.round_planned_bytes, p.planned_bytes)
                self.assertTrue(0 <= p.bytes <= p.planned_bytes, p)
                self.assertTrue(0 <= p.round_bytes <= p.round_planned_bytes, p)
            self.assertEqual([p.bytes for p in seen], sorted(p.bytes for p in seen))
            self.assertGreater(seen[-1].seconds, seen[0].seconds - 1e-9)
            # The default prints such a line, with the bytes against the plan.
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                refit.log_progress(seen[-1])
            self.assertIn(f"refit: trainer rank 0: round {v} running", err.getvalue())
            self.assertRegex(err.getvalue(), r"this member [0-9.]+ k?B of [0-9.]+ [kMG]?B ")
        finally:
            d.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
