"""What a Python user meets around the rounds: a token file's newline does
not crash the process (nor print the token), host arrays are checked for
element width and shape, close() leaves so the same program can run again
at once (and a stale member of an earlier run is named when it is the cause
of an error), malformed addresses fail at once, refitd's shutdown gives a
reason, exceptions have a class per code and results are typed, and the
host library is picked where there is no GPU, and a Hugging Face id is read
from the local cache.

  client_api_test.py REFITD LIBREFIT_CLIENT_SO TINY_QWEN3_CONFIG_JSON
"""
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

REFITD, LIB, TINY_QWEN3_JSON = (os.path.abspath(p) for p in sys.argv[1:4])
del sys.argv[1:4]
os.environ["REFIT_CLIENT_LIB"] = LIB
import refit  # noqa: E402  (after REFIT_CLIENT_LIB is set)
from refit import _ffi  # noqa: E402
import refitd_process  # noqa: E402

PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(refit.__file__)))
TRAINER = "megatron:tp=1"
ENGINE = "vllm:tp=1"


def run_python(code, *args, timeout=60):
    """`code` with `args` in a fresh interpreter with this test's refit
    module; the CompletedProcess (exit code, stdout, stderr)."""
    return subprocess.run([sys.executable, "-c", code, *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONPATH=PYTHONPATH))


def host_buffers(side, model, convention):
    want = refit.expected_buffers(side=side, rank=0, model=model, convention=convention)
    return {b.name: bytearray(b.nbytes) for b in want}


def host_buffers_of_rank(rank, convention, model="tiny-qwen3"):
    want = refit.expected_buffers(side="trainer", rank=rank, model=model,
                                  convention=convention)
    return {b.name: bytearray(b.nbytes) for b in want}


class FakeArray:
    """The parts of a numpy array refit reads (numpy is not installed here):
    dtype name and width, shape, flags, address, bytes."""

    class _DType:
        def __init__(self, name, itemsize):
            self.name, self.itemsize = name, itemsize

    def __init__(self, dtype, itemsize, shape):
        n = itemsize
        for d in shape:
            n *= d
        self._storage = bytearray(n)
        self.dtype = self._DType(dtype, itemsize)
        self.shape = tuple(shape)
        self.nbytes = n
        self.flags = {"C_CONTIGUOUS": True, "WRITEABLE": True}
        self.__array_interface__ = {"shape": self.shape}
        import ctypes
        self._c = (ctypes.c_char * n).from_buffer(self._storage)
        self.ctypes = type("C", (), {"data": ctypes.addressof(self._c)})()


# A program that joins a trainer and engine `engine` (model `model`) in one
# process, prepares, optionally runs round `version`, and then closes (or
# dies without closing when `die`). Prints "plan", "round" lines or the error.
PROGRAM = """
import sys, threading, refit
server, model, engine, version, die = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "die"
def bufs(side, conv):
    return {b.name: bytearray(b.nbytes) for b in refit.expected_buffers(
        side=side, rank=0, model=model, convention=conv)}
try:
    t = refit.Member(server=server, side="trainer", rank=0, model=model,
                     convention="megatron:tp=1", buffers=bufs("trainer", "megatron:tp=1"),
                     timeout=10)
    e = refit.Member(server=server, side="engine", engine_id=engine, rank=0, model=model,
                     convention="vllm:tp=1", buffers=bufs("engine", "vllm:tp=1"), timeout=10)
    info = t.prepare(timeout=10)
    e.prepare(timeout=10)
    print("plan", type(info).__name__, info.global_world, info["global_world"], flush=True)
    if version:
        t.start_round(version, timeout=10)
        out = {}
        th = threading.Thread(target=lambda: out.update(e=e.run_round(e.wait_for_round(10), 10)))
        th.start()
        stats = t.run_round(t.wait_for_round(10), 10)
        th.join()
        print("round", type(stats).__name__, stats.bytes_sent > 0,
              out["e"].bytes_received > 0, dict(**stats) == {k: stats[k] for k in stats.keys()},
              flush=True)
        try:
            t.start_round(version - 1, timeout=10)
        except refit.InvalidArgumentError as x:
            print("stale version", x.message, flush=True)
    if die:
        import os
        os._exit(0)
    t.close()
    e.close()
except refit.RefitError as x:
    print("error", type(x).__name__, x.message.replace("\\n", " "), flush=True)
    sys.exit(3)
"""


class ClientApiTest(unittest.TestCase):

    def test_token_with_newline_works_and_bad_bytes_do_not_crash(self):
        tmp = os.environ.get("TEST_TMPDIR", tempfile.gettempdir())
        token_file = os.path.join(tmp, "token")
        with open(token_file, "w") as f:
            f.write("s3cret-value\n")
        d = refitd_process.Refitd(REFITD, f"--token_file={token_file}")
        try:
            code = (
                "import sys, refit\n"
                "bufs = {b.name: bytearray(b.nbytes) for b in refit.expected_buffers(\n"
                "    side='trainer', rank=0, model='tiny-qwen3', convention='megatron:tp=1')}\n"
                "try:\n"
                "    m = refit.Member(server=sys.argv[1], side='trainer', rank=0,\n"
                "                     model='tiny-qwen3', convention='megatron:tp=1',\n"
                "                     buffers=bufs, token=eval(sys.argv[2]), timeout=10)\n"
                "    m.close()\n"
                "    print('joined')\n"
                "except refit.InvalidArgumentError as e:\n"
                "    print('refused', e.code_name, e.message)\n")
            runs = {
                "newline": "open(%r).read()" % token_file,
                "inner newline": "'s3cret\\nvalue'",
                "control byte": "'s3cret\\x01value'",
                "non-ASCII": "'s3cr\\u00e9t-value'",
            }
            for what, token in runs.items():
                out = run_python(code, d.address, token)
                self.assertEqual(out.returncode, 0, f"{what}: {out}")  # not 134 (abort)
                self.assertNotIn("s3cr", out.stderr + out.stdout, what)
                self.assertNotIn("Illegal header", out.stderr, what)
                if what == "newline":
                    self.assertEqual(out.stdout.strip(), "joined", out)
                else:
                    self.assertTrue(out.stdout.startswith("refused INVALID_ARGUMENT"), out)
                    self.assertIn("token: byte", out.stdout, what)
        finally:
            d.stop()

    def test_host_arrays_are_checked_for_width_and_shape(self):
        want = refit.expected_buffers(side="engine", rank=0, model="tiny-qwen3",
                                      convention=ENGINE)
        qkv = next(b for b in want if b.name.endswith("qkv_proj.weight"))
        self.assertEqual(qkv.dtype, "bf16")
        rows, cols = qkv.shape

        def join(array):
            buffers = {b.name: bytearray(b.nbytes) for b in want}
            buffers[qkv.name] = array
            return refit.Member(server="127.0.0.1:1", side="engine", engine_id="e0", rank=0,
                                model="tiny-qwen3", convention=ENGINE, buffers=buffers,
                                timeout=0.5)

        # Transposed, as np.uint16 of the right byte size: refused, naming both shapes.
        with self.assertRaises(refit.InvalidArgumentError) as cm:
            join(FakeArray("uint16", 2, [cols, rows]))
        self.assertIn(f"rank 0: parameter {qkv.name}: shape [{cols}, {rows}], "
                      f"expected [{rows}, {cols}]", cm.exception.message)
        # Right bytes, wrong element width.
        with self.assertRaises(refit.InvalidArgumentError) as cm:
            join(FakeArray("uint32", 4, [rows, cols // 2]))
        self.assertIn(f"parameter {qkv.name}: dtype uint32 has 4-byte elements, "
                      f"expected bf16 (2 bytes)", cm.exception.message)
        self.assertIn("np.uint16", cm.exception.message)
        # numpy's float16 for a bf16 weight: another type of the same width.
        with self.assertRaises(refit.InvalidArgumentError) as cm:
            join(FakeArray("float16", 2, [rows, cols]))
        self.assertIn("dtype f16, expected bf16", cm.exception.message)
        # np.uint16 or ml_dtypes.bfloat16 in the weight's shape, and uint8
        # byte views: accepted (then refitd is not there).
        for ok in (FakeArray("uint16", 2, [rows, cols]), FakeArray("bfloat16", 2, [rows, cols]),
                   FakeArray("uint8", 1, [rows * cols * 2])):
            with self.assertRaises(refit.UnavailableError):
                join(ok)
        try:
            import numpy as np
        except ImportError:
            return
        with self.assertRaises(refit.InvalidArgumentError) as cm:
            join(np.zeros((cols, rows), dtype=np.uint16))
        self.assertIn(f"shape [{cols}, {rows}]", cm.exception.message)

    def test_close_leaves_and_the_program_runs_again_at_once(self):
        # refitd would keep a member that did not leave for a minute.
        d = refitd_process.Refitd(REFITD, "--heartbeat_timeout_ms=60000")
        try:
            runs = []
            for model, engine, version in (("tiny-qwen3", "e0", 5), ("tiny-llama", "e1", 0)):
                t0 = time.time()
                out = run_python(PROGRAM, d.address, model, engine, version, "close")
                runs.append((out, time.time() - t0))
        finally:
            d.stop()
        (one, _), (two, took) = runs
        self.assertEqual(one.returncode, 0, one)
        lines = one.stdout.splitlines()
        self.assertEqual(lines[0], "plan PlanInfo 2 2", one)
        self.assertEqual(lines[1], "round RoundStats True True True", one)
        # Versions carry over: the message says where to start.
        self.assertIn("version: 4 is not above the last version 5", lines[2])
        self.assertIn("start at 6", lines[2])
        # A clean close logs no warning.
        self.assertNotIn("warn", one.stderr, one.stderr)
        # The second program (another model, another engine id) plans at
        # once: the first one's members left.
        self.assertEqual(two.returncode, 0, two)
        self.assertEqual(two.stdout.splitlines()[0], "plan PlanInfo 2 2", two)
        self.assertLess(took, 30)

    def test_a_stale_member_of_an_earlier_run_is_named(self):
        d = refitd_process.Refitd(REFITD, "--heartbeat_timeout_ms=60000")
        try:
            out = run_python(PROGRAM, d.address, "tiny-qwen3", "e0", 0, "die")
            self.assertEqual(out.returncode, 0, out)
            time.sleep(3.5)  # its members' heartbeats stop
            out = run_python(PROGRAM, d.address, "tiny-llama", "e1", 0, "close")
        finally:
            d.stop()
        # The earlier run's trainer rank 0 still holds its identity (bound to
        # its secret until it expires): the new process is told which member,
        # since when it is silent, and what to do.
        self.assertEqual(out.returncode, 3, out)
        self.assertIn("error UnavailableError", out.stdout)
        self.assertIn("trainer rank 0", out.stdout)
        self.assertIn("registered with another member secret", out.stdout)
        self.assertIn("its last heartbeat came", out.stdout)
        self.assertIn("retry once it expired", out.stdout)
        print(out.stdout.strip())

    def test_a_stale_member_refusing_a_registration_is_named(self):
        # The earlier run had one trainer rank; this one has two.
        d = refitd_process.Refitd(REFITD, "--heartbeat_timeout_ms=60000")
        try:
            out = run_python(PROGRAM, d.address, "tiny-qwen3", "e0", 0, "die")
            self.assertEqual(out.returncode, 0, out)
            time.sleep(3.5)
            with self.assertRaises(refit.InvalidArgumentError) as cm:
                refit.Member(server=d.address, side="trainer", rank=1, model="tiny-qwen3",
                             convention="megatron:tp=2",
                             buffers=host_buffers_of_rank(1, "megatron:tp=2"), timeout=10)
        finally:
            d.stop()
        self.assertIn("world_size", cm.exception.message)
        self.assertIn("refitd still holds", cm.exception.message)
        self.assertIn("trainer rank 0 (host", cm.exception.message)

    def test_malformed_addresses_fail_at_once(self):
        bufs = host_buffers("trainer", "tiny-qwen3", TRAINER)
        for bad in ("127.0.0.1", "http://127.0.0.1:50051", "localhost:port"):
            t0 = time.time()
            with self.assertRaises(refit.InvalidArgumentError) as cm:
                refit.Member(server=bad, side="trainer", rank=0, model="tiny-qwen3",
                             convention=TRAINER, buffers=bufs, timeout=30)
            self.assertLess(time.time() - t0, 0.5, bad)
            self.assertIn(f'server "{bad}"', cm.exception.message)
        t0 = time.time()
        with self.assertRaises(refit.UnavailableError) as cm:
            refit.Member(server="127.0.0.1:1", side="trainer", rank=0, model="tiny-qwen3",
                         convention=TRAINER, buffers=bufs, timeout=1.0)
        self.assertLess(time.time() - t0, 3)
        self.assertIn("connection refused", cm.exception.message)

    def test_refitd_shutdown_gives_a_reason(self):
        d = refitd_process.Refitd(REFITD)
        m = refit.Member(server=d.address, side="trainer", rank=0, model="tiny-qwen3",
                         convention=TRAINER, buffers=host_buffers("trainer", "tiny-qwen3",
                                                                  TRAINER), timeout=10)
        try:
            got = {}

            def wait():
                try:
                    m.kv_get("never-set", timeout=30)
                except refit.RefitError as e:
                    got["wait"] = e
            waiter = threading.Thread(target=wait)
            waiter.start()
            time.sleep(0.3)
            d.p.send_signal(signal.SIGTERM)  # refitd drains and exits
            d.p.wait(timeout=30)
            waiter.join(timeout=30)
            for what, call in (("wait", None), ("next call", lambda: m.kv_set("k", "v", 5)),
                               ("wait_for_round", lambda: m.wait_for_round(5))):
                if call is not None:
                    with self.assertRaises(refit.RefitError) as cm:
                        call()
                    got[what] = cm.exception
                e = got[what]
                self.assertIsInstance(e, refit.UnavailableError, f"{what}: {e}")
                self.assertNotEqual(e.message.strip(), "", what)
                self.assertNotIn("CANCELLED", str(e), what)
        finally:
            m.close()
            d.stop()

    def test_exceptions_have_a_class_per_code_and_pickle(self):
        cases = {10: refit.AbortedError, 14: refit.UnavailableError, 5: refit.NotFoundError,
                 3: refit.InvalidArgumentError, 4: refit.DeadlineExceededError,
                 9: refit.FailedPreconditionError, 16: refit.UnauthenticatedError}
        for code, cls in cases.items():
            e = refit.RefitError(code, f"{refit.StatusCode(code).name}: why")
            self.assertIs(type(e), cls)
            self.assertIsInstance(e, refit.RefitError)
            self.assertEqual(e.code, refit.StatusCode(code))
            self.assertEqual(e.code, code)
            self.assertEqual(e.code_name, refit.StatusCode(code).name)
            self.assertEqual(e.message, "why")
            self.assertEqual(str(e), f"{e.code_name}: why")
            again = pickle.loads(pickle.dumps(e))
            self.assertIs(type(again), cls)
            self.assertEqual((again.code, again.message), (e.code, e.message))
            self.assertEqual(cls("direct").code, code)
        other = refit.RefitError(13, "internal")
        self.assertIs(type(other), refit.RefitError)
        self.assertEqual(other.code_name, "INTERNAL")
        self.assertEqual(refit.RefitError(99, "x").code_name, "99")
        with self.assertRaises(refit.NotFoundError) as cm:
            refit.expected_buffers(side="engine", rank=0, model="no-such-model",
                                   convention=ENGINE)
        self.assertIn("no-such-model", cm.exception.message)
        with self.assertRaises(refit.InvalidArgumentError):
            refit.raise_for_status(3)
        refit.raise_for_status(0)

    def test_a_hugging_face_id_is_read_from_the_local_cache(self):
        with open(TINY_QWEN3_JSON) as f:
            config = f.read()
        with tempfile.TemporaryDirectory() as hub:
            repo = os.path.join(hub, "models--Org--Tiny-Qwen3")
            os.makedirs(os.path.join(repo, "refs"))
            os.makedirs(os.path.join(repo, "snapshots", "0123abc"))
            with open(os.path.join(repo, "refs", "main"), "w") as f:
                f.write("0123abc")
            with open(os.path.join(repo, "snapshots", "0123abc", "config.json"), "w") as f:
                f.write(config)
            os.environ["HF_HUB_CACHE"] = hub
            try:
                got = refit.expected_buffers(side="engine", rank=0, model="Org/Tiny-Qwen3",
                                             convention=ENGINE)
                with self.assertRaises(refit.NotFoundError) as cm:
                    refit.expected_buffers(side="engine", rank=0, model="Org/Missing",
                                           convention=ENGINE)
            finally:
                del os.environ["HF_HUB_CACHE"]
        self.assertEqual(got, refit.expected_buffers(side="engine", rank=0, model="tiny-qwen3",
                                                     convention=ENGINE))
        self.assertIn("models--Org--Missing", cm.exception.message)
        with self.assertRaises(refit.NotFoundError) as cm:
            refit.expected_buffers(side="engine", rank=0, model="/no/such/config.json",
                                   convention=ENGINE)
        self.assertIn("no such file", cm.exception.message)

    def test_host_library_where_there_is_no_gpu(self):
        self.assertFalse(_ffi.usable_gpu({}, dev="/nonexistent"))
        with tempfile.TemporaryDirectory() as dev:
            self.assertFalse(_ffi.usable_gpu({}, dev=dev))
            open(os.path.join(dev, "nvidiactl"), "w").close()
            self.assertFalse(_ffi.usable_gpu({}, dev=dev))  # the driver, no GPU
            open(os.path.join(dev, "nvidia0"), "w").close()
            self.assertTrue(_ffi.usable_gpu({}, dev=dev))
            self.assertFalse(_ffi.usable_gpu({"CUDA_VISIBLE_DEVICES": ""}, dev=dev))
            self.assertFalse(_ffi.usable_gpu({"CUDA_VISIBLE_DEVICES": "-1"}, dev=dev))
        names = [os.path.basename(p) for p in _ffi.candidates(False, False, None, False)]
        self.assertEqual(names[0], "librefit_client.so")
        self.assertIn("librefit_client_gpu.so", names)  # the fallback
        names = [os.path.basename(p) for p in _ffi.candidates(False, False, None, True)]
        self.assertEqual(names[0], "librefit_client_gpu.so")
        names = [os.path.basename(p) for p in _ffi.candidates(True, False, None, False)]
        self.assertEqual(set(names), {"librefit_client_gpu.so"})  # asked for: GPU only
        names = [os.path.basename(p) for p in _ffi.candidates(False, True, None, False)]
        self.assertEqual(names[0], "librefit_client_testing.so")
        # The GPU library on a host without CUDA: the missing one is named.
        advice = _ffi.missing_library_advice(
            "libcudart.so.13: cannot open shared object file: No such file or directory")
        self.assertTrue(advice.startswith("it needs libcudart.so.13, the CUDA runtime"), advice)
        self.assertIn("host buffers need none of it", advice)
        self.assertIn("NCCL", _ffi.missing_library_advice(
            "libnccl.so.2: cannot open shared object file: No such file or directory"))
        self.assertEqual(_ffi.missing_library_advice("other"), "other")


if __name__ == "__main__":
    unittest.main(verbosity=2)
