"""The Python client end to end: refitd and one process per member, each
using the refit module with host buffers (bytearrays): a Megatron TP2
trainer into two vLLM engines (TP2, and TP1 x DP2) over the host
transport, every engine byte checked after every round; errors that name
the parameter and rank; a member killed inside a round makes the others
fail within the deadline.

  python_client_test.py REFITD LIBREFIT_CLIENT_TESTING_SO MEMBER_PY TORCH_GPU_CHECK_PY
                        LIBREFIT_CLIENT_SO

The members load the testing variant of the client library (test
patterns); the shipped one must refuse refit.testing's helpers by name.
"""
import array
import os
import subprocess
import sys
import threading
import time
import unittest
import json

REFITD, LIB, MEMBER, GPU_CHECK, SHIPPED_LIB = (os.path.abspath(p) for p in sys.argv[1:6])
del sys.argv[1:6]
os.environ["REFIT_CLIENT_LIB"] = LIB
import refit  # noqa: E402  (after REFIT_CLIENT_LIB is set)
import refitd_process  # noqa: E402

PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(refit.__file__)))


def Refitd(*flags, port=0):
    """refitd on 127.0.0.1 (see refitd_process.py)."""
    return refitd_process.Refitd(REFITD, *flags, port=port)


def run_members(server, specs, timeout, env=None, stuck=()):
    """Starts one member.py per spec, waits for all (each bounded by
    `timeout`) but those at the indices `stuck`, which are killed once the
    others are done; returns [(returncode, [json events])]."""
    e = dict(os.environ, PYTHONPATH=PYTHONPATH, **(env or {}))
    procs = [subprocess.Popen([sys.executable, MEMBER, server, *map(str, s)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=e) for s in specs]
    out = []
    until = time.time() + timeout
    order = [i for i in range(len(procs)) if i not in stuck] + list(stuck)
    for i in order:
        p = procs[i]
        if i in stuck:
            p.kill()
        try:
            text, _ = p.communicate(timeout=max(1, until - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"member {p.args[3:]} still running after {timeout} s")
        events = []
        for line in text.splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                events.append({"event": "text", "line": line})
        out.append((i, (p.returncode, events)))
    return [r for _, r in sorted(out, key=lambda x: x[0])]


TRAINER = "megatron:tp=2"
E0 = "vllm:tp=2"
E1 = "vllm:tp=1,dp=2"


class PythonClientTest(unittest.TestCase):

    def test_rounds_move_every_engine_byte(self):
        d = Refitd("--min_engines=2")
        try:
            specs = [("trainer", r, TRAINER, 2) for r in range(2)]
            specs += [("engine", r, E0, 2, "e0") for r in range(2)]
            specs += [("engine", r, E1, 2, "e1") for r in range(2)]
            results = run_members(d.address, specs, timeout=240)
        finally:
            d.stop()
        for spec, (rc, events) in zip(specs, results):
            self.assertEqual(rc, 0, f"{spec}: {events}")
            rounds = [e for e in events if e["event"] == "round"]
            self.assertEqual([e["version"] for e in rounds], [1, 2], f"{spec}: {events}")
            if spec[0] == "engine":
                self.assertTrue(all(e["checked"] and e["bytes_received"] > 0
                                    for e in rounds), events)
            else:
                self.assertTrue(all(e["bytes_sent"] > 0 for e in rounds), events)
        fingerprints = {e["fingerprint"] for _, ev in results for e in ev
                        if e["event"] == "plan"}
        self.assertEqual(len(fingerprints), 1)

    def test_bad_buffers_name_the_parameter_and_rank(self):
        want = refit.expected_buffers(side="engine", rank=1, model="tiny-qwen3",
                                      convention=E0)
        self.assertIn("model.layers.0.self_attn.qkv_proj.weight",
                      [b.name for b in want])
        buffers = {b.name: bytearray(b.nbytes) for b in want}
        short = want[0].name
        buffers[short] = bytearray(want[0].nbytes - 1)
        missing = want[-1].name
        del buffers[missing]
        t0 = time.time()
        with self.assertRaises(refit.RefitError) as cm:
            refit.Member(server="127.0.0.1:1", side="engine", engine_id="e0",
                         rank=1, model="tiny-qwen3", convention=E0,
                         buffers=buffers, timeout=30)
        self.assertLess(time.time() - t0, 5)  # checked before connecting
        e = cm.exception
        self.assertEqual(e.code_name, "INVALID_ARGUMENT")
        self.assertIn(short, e.message)
        self.assertIn(missing, e.message)
        self.assertIn("rank 1", e.message)

        with self.assertRaises(refit.RefitError) as cm:
            refit.Member(server="127.0.0.1:1", side="engine", engine_id="e0",
                         rank=1, model="tiny-qwen3", convention=E0,
                         buffers={want[0].name: b"read-only bytes"})
        self.assertIn(want[0].name, cm.exception.message)
        self.assertIn("writeable", cm.exception.message)

        # Right size, wrong element type: bf16 weights given as float32
        # (array 'f') must not move as garbage; bytearrays are raw bytes.
        qkv = next(b for b in want if b.name.endswith("qkv_proj.weight"))
        self.assertEqual(qkv.dtype, "bf16")
        typed = {b.name: bytearray(b.nbytes) for b in want}
        typed[qkv.name] = array.array("f", bytes(qkv.nbytes))
        with self.assertRaises(refit.RefitError) as cm:
            refit.Member(server="127.0.0.1:1", side="engine", engine_id="e0",
                         rank=1, model="tiny-qwen3", convention=E0, buffers=typed)
        self.assertEqual(cm.exception.code_name, "INVALID_ARGUMENT")
        self.assertIn(f"rank 1: parameter {qkv.name}: dtype f32, expected bf16",
                      cm.exception.message)

        with self.assertRaises(refit.RefitError) as cm:
            refit.expected_buffers(side="engine", rank=0, model="no-such-model",
                                   convention=E0)
        self.assertIn("no-such-model", cm.exception.message)
        # The C library's message starts with the code; the error says it once.
        e = cm.exception
        self.assertFalse(e.message.startswith(e.code_name), e.message)
        self.assertTrue(str(e).startswith(e.code_name + ": "), str(e))
        self.assertEqual(str(e).count(e.code_name), 1, str(e))

    def test_gpu_check_script_compiles(self):
        # It runs only on GPU hosts, from the bundle: at least it must parse
        # here, with the Python it will meet there or older.
        with open(GPU_CHECK) as f:
            compile(f.read(), GPU_CHECK, "exec")

    def test_one_library_per_process(self):
        lib = refit.load_library()  # REFIT_CLIENT_LIB: the host build
        self.assertIn(b"host", lib.refit_build_info())
        with self.assertRaises(refit.RefitError) as cm:
            refit.load_library(gpu=True)
        self.assertEqual(cm.exception.code_name, "FAILED_PRECONDITION")
        self.assertIn("librefit_client_gpu.so", cm.exception.message)

    def test_shipped_library_has_no_test_patterns(self):
        # With the shipped library loaded (its own process: this one loaded
        # the testing variant), the test helpers fail with a clear error,
        # not a crash or a silent no-op. (A stand-in member: the helpers
        # look for the testing ABI before they touch the handle.)
        code = ("import types, refit, refit.testing\n"
                "lib = refit.load_library()\n"
                "m = types.SimpleNamespace(library=lib, buffers={}, handle=lambda: None)\n"
                "for f in (refit.testing.load_library,\n"
                "          lambda: refit.testing.fill_pattern(m, 1),\n"
                "          lambda: refit.testing.check_pattern(m, 1)):\n"
                "    try:\n"
                "        f()\n"
                "        print('no error')\n"
                "    except refit.RefitError as e:\n"
                "        print(e.code_name, e.message)\n")
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
            env=dict(os.environ, PYTHONPATH=PYTHONPATH, REFIT_CLIENT_LIB=SHIPPED_LIB))
        lines = out.stdout.splitlines()
        self.assertEqual(len(lines), 3, out)
        for line in lines:
            self.assertTrue(line.startswith("FAILED_PRECONDITION"), out)
            self.assertIn("librefit_client_testing.so", line)
            self.assertIn(SHIPPED_LIB, line)

    def test_a_library_of_another_release_is_named(self):
        # Any shared library without refit's symbols stands in for one from
        # another release (its own process: this one loaded the real one).
        code = ("import refit\n"
                "try:\n"
                "    refit.load_library()\n"
                "except refit.RefitError as e:\n"
                "    print(e.code_name, e.message)\n")
        with open("/proc/self/maps") as maps:
            libc = next((line.split()[-1] for line in maps
                         if "/libc.so" in line or "/libc-" in line), None)
        self.assertIsNotNone(libc)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=PYTHONPATH,
                                      REFIT_CLIENT_LIB=libc), timeout=60)
        self.assertIn("NOT_FOUND", out.stdout, out)
        self.assertIn("lacks refit_", out.stdout, out)
        self.assertIn("another refit release", out.stdout, out)

    def test_token_is_sent_and_checked(self):
        token_file = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "token")
        with open(token_file, "w") as f:
            f.write("s3cret\n")
        d = Refitd(f"--token_file={token_file}")
        try:
            want = refit.expected_buffers(side="trainer", rank=0, model="tiny-qwen3",
                                          convention="megatron:tp=1")
            def join(token):
                return refit.Member(server=d.address, side="trainer", rank=0,
                                    model="tiny-qwen3", convention="megatron:tp=1",
                                    buffers={b.name: bytearray(b.nbytes) for b in want},
                                    token=token, timeout=10)
            for bad in (None, "wrong"):
                with self.assertRaises(refit.RefitError) as cm:
                    join(bad)
                self.assertEqual(cm.exception.code_name, "UNAUTHENTICATED", bad)
            with join("s3cret") as m:
                self.assertEqual(m.current_version("e0"), 0)  # no engine yet
                self.assertEqual(m.engine_state("e0"), (0, 0))
                m.leave()
        finally:
            d.stop()

    def test_absent_refitd_fails_within_the_timeout(self):
        want = refit.expected_buffers(side="trainer", rank=0, model="tiny-qwen3",
                                      convention="megatron:tp=1")
        t0 = time.time()
        with self.assertRaises(refit.RefitError) as cm:
            refit.Member(server="127.0.0.1:1", side="trainer", rank=0,
                         model="tiny-qwen3", convention="megatron:tp=1",
                         buffers={b.name: bytearray(b.nbytes) for b in want},
                         timeout=1.0)
        self.assertEqual(cm.exception.code_name, "UNAVAILABLE")
        self.assertLess(time.time() - t0, 5)

    def test_member_killed_in_a_round_fails_the_others_fast(self):
        # Trainer rank 1 dies once round 1 is announced, before it connects
        # its transport: nothing on the wire tells the others. refitd
        # notices its silence (2 s without heartbeats) and aborts the round;
        # the others must fail then, with refitd's reason, not at their
        # 30 s data-plane deadline.
        specs, results = self.run_with_trainer_1(rounds=1, flag="--die-in-round=1")
        self.assertEqual(results[1][0], 3, results[1][1])
        self.assert_failed_fast(specs, results, version=1)

    def test_member_frozen_in_a_connected_round_fails_the_others_fast(self):
        # Round 1 connects every transport; in round 2 trainer rank 1 stops
        # (SIGSTOP) before sending: its sockets stay open, so no peer sees
        # an error on the wire. refitd removes it after 2 s without
        # heartbeats and aborts the round; that must cancel the others'
        # connected transports then, not at their 30 s deadline.
        specs, results = self.run_with_trainer_1(rounds=2, flag="--freeze-in-round=2",
                                                 stuck=(1,))
        self.assertIn("freezing", [e["event"] for e in results[1][1]], results[1])
        self.assert_failed_fast(specs, results, version=2)

    def test_replacement_member_joins_and_the_next_round_commits(self):
        # Trainer rank 1 dies inside round 1; the others fail that round
        # and wait for a complete membership; a new trainer rank 1 process
        # joins, taking its place at once with the job key (without one it
        # waits for refitd to expire the dead process); round 2 moves every
        # byte again.
        key_file = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "job_key")
        with open(key_file, "w") as f:
            f.write("the-job-key\n")
        d = Refitd("--heartbeat_timeout_ms=2000", f"--job_key_file={key_file}")
        procs = []
        try:
            e = dict(os.environ, PYTHONPATH=PYTHONPATH, RUN_TIMEOUT="30",
                     REFIT_TEST_JOB_KEY="the-job-key")
            def start(*spec):
                procs.append(subprocess.Popen(
                    [sys.executable, MEMBER, d.address, *map(str, spec)],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e))
            start("trainer", 0, TRAINER, 2, "--survive")
            start("trainer", 1, TRAINER, 2, "--die-in-round=1")
            start("engine", 0, E0, 2, "e0", "--survive")
            start("engine", 1, E0, 2, "e0", "--survive")
            self.assertEqual(procs[1].wait(timeout=60), 3)
            start("trainer", 1, TRAINER, 2, "--first-round=2")
            out = []
            for p in procs:
                text, _ = p.communicate(timeout=90)
                out.append((p.returncode, [json.loads(l) for l in text.splitlines()
                                           if l.startswith("{")]))
        finally:
            for p in procs:
                p.kill()
            d.stop()
        for i in (0, 2, 3, 4):
            rc, events = out[i]
            self.assertEqual(rc, 0, events)
            self.assertEqual([e["version"] for e in events if e["event"] == "round"],
                             [2], events)
            if i != 4:  # the survivors failed round 1 with refitd's reason
                failed = [e for e in events if e["event"] == "round_failed"]
                self.assertEqual([(e["version"], e["code"]) for e in failed],
                                 [(1, "ABORTED")], events)
        for i in (2, 3):
            events = out[i][1]
            self.assertTrue(all(e["checked"] for e in events if e["event"] == "round"))
            # refitd tells that round 1 may have left part of itself in
            # engine e0, until round 2 commits.
            failed = [e for e in events if e["event"] == "round_failed"][0]
            self.assertEqual((failed["committed"], failed["torn"]), (0, 1), failed)
            done = [e for e in events if e["event"] == "round"][0]
            self.assertEqual((done["committed"], done["torn"]), (2, 0), done)

    def test_members_rejoin_a_restarted_refitd(self):
        # refitd is killed between rounds 1 and 2 and started again on the
        # same address with nothing but its flags: every member rejoins,
        # the registrations rebuild the same plan, rounds 2 and 3 commit and
        # every engine byte is checked.
        flags = ("--min_engines=2", "--heartbeat_timeout_ms=2000")
        # Below the ephemeral range: no other test takes it while refitd is down.
        d = Refitd(*flags, port=refitd_process.restartable_port())
        specs = [("trainer", r, TRAINER, 3) for r in range(2)]
        specs += [("engine", r, E0, 3, "e0") for r in range(2)]
        specs += [("engine", r, E1, 3, "e1") for r in range(2)]
        e = dict(os.environ, PYTHONPATH=PYTHONPATH)
        procs = [subprocess.Popen(
            [sys.executable, MEMBER, d.address, *map(str, s), "--rejoin",
             "--sleep-after-round=1"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
            for s in specs]
        events = [[] for _ in procs]

        def read(i):
            for line in procs[i].stdout:
                try:
                    events[i].append(json.loads(line))
                except ValueError:
                    events[i].append({"event": "text", "line": line})
        readers = [threading.Thread(target=read, args=(i,)) for i in range(len(procs))]
        for t in readers:
            t.start()
        restarted = None
        try:
            until = time.time() + 120
            while time.time() < until and not all(
                    any(x["event"] == "round" and x["version"] == 1 for x in ev)
                    for ev in events):
                if any(p.poll() is not None for p in procs):
                    break
                time.sleep(0.05)
            self.assertTrue(all(any(x["event"] == "round" for x in ev) for ev in events),
                            events)
            d.stop()
            time.sleep(0.5)
            restarted = Refitd(*flags, port=d.port)
            for p in procs:
                p.wait(timeout=max(1, until - time.time()))
        finally:
            for p in procs:
                p.kill()
            for t in readers:
                t.join(timeout=10)
            for p in procs:
                p.stdout.close()
            if restarted is not None:
                restarted.stop()
        fingerprints = set()
        for spec, p, ev in zip(specs, procs, events):
            self.assertEqual(p.returncode, 0, f"{spec}: {ev}")
            self.assertEqual([x["version"] for x in ev if x["event"] == "round"],
                             [1, 2, 3], f"{spec}: {ev}")
            rejoined = [x for x in ev if x["event"] == "rejoined"]
            self.assertEqual([x["version"] for x in rejoined], [2], f"{spec}: {ev}")
            fingerprints |= {x["fingerprint"] for x in ev if x["event"] in ("plan", "rejoined")}
            if spec[0] == "engine":
                self.assertTrue(all(x["checked"] for x in ev if x["event"] == "round"), ev)
            gone = [x for x in ev if x["event"] == "refitd_gone"][0]
            print(f"{spec[:2]} {gone['code']}: {gone['message'][:90]}; rejoined and "
                  f"prepared {rejoined[0]['after_s']:.2f} s later")
        self.assertEqual(len(fingerprints), 1)

    def run_with_trainer_1(self, rounds, flag, stuck=()):
        """Megatron TP2 -> vLLM TP2 for `rounds` rounds, trainer rank 1
        given `flag`; refitd drops a member after 2 s without heartbeats and
        each data plane has 30 s. Returns (specs, results)."""
        d = Refitd("--heartbeat_timeout_ms=2000")
        try:
            specs = [("trainer", 0, TRAINER, rounds),
                     ("trainer", 1, TRAINER, rounds, flag),
                     ("engine", 0, E0, rounds, "e0"),
                     ("engine", 1, E0, rounds, "e0")]
            return specs, run_members(d.address, specs, timeout=90,
                                      env={"RUN_TIMEOUT": "30"}, stuck=stuck)
        finally:
            d.stop()

    def assert_failed_fast(self, specs, results, version):
        """Members 0, 2, 3 committed the rounds before `version` and failed
        `version` with refitd's ABORTED reason (naming the trainer), well
        before their 30 s data-plane deadline."""
        for i in (0, 2, 3):
            rc, events = results[i]
            self.assertEqual(rc, 4, f"{specs[i]}: {events}")
            self.assertEqual([e["version"] for e in events if e["event"] == "round"],
                             list(range(1, version)), events)
            failed = [e for e in events if e["event"] == "round_failed"]
            self.assertEqual(len(failed), 1, events)
            print(f"{specs[i][:2]} failed {failed[0]['after_s']:.1f} s into round "
                  f"{version}: {failed[0]['message']}")
            self.assertEqual(failed[0]["code"], "ABORTED", failed)
            self.assertIn("trainer rank 1", failed[0]["message"])
            self.assertLess(failed[0]["after_s"], 15, failed)

if __name__ == "__main__":
    unittest.main(verbosity=2)
