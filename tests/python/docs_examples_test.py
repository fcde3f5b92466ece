"""Every example in README.md and docs/*.md runs as written, or is listed
in SKIP below with the reason it cannot run here.

An example is a fenced block marked ``sh``, ``python``, ``c`` or ``c++``.
A shell block is read line by line (continuation lines joined, trailing
comments dropped); each line must either run or start with a SKIP entry of
its page. Unmarked blocks show output or formulas; a ``refit`` command
line among them (the command whose output they show) runs too. A Python block runs
whole in a fresh interpreter with this tree's refit module, unless SKIP
lists its first line.

What runs, and what stands in for the user's machine:
* a shell block runs in a fresh temporary directory. A ``refitd ...``
  line starts the built refitd with the line's flags on 127.0.0.1 (a port
  of its own instead of the line's ``--address``; the TLS certificate and
  key it names, and a ``ca.pem`` that signed them, made there with
  openssl); the block's later lines ask it, and it stops with the block.
* ``refit ...`` lines run the built ``refit``; ``[--flag value]`` optional
  groups are given (the first of ``a | b``); a server address
  (``refitd-host:50051``, ``127.0.0.1:50051``) is the block's refitd, or
  one started for the line with the token file the line names
  (``/etc/refit/token`` is a file written here); a ``--checkpoint DIR`` of
  a built-in model is a stand-in checkpoint written there (finite BF16
  values, the trainer's fsdp:dp=1 tensors); the line must exit 0.
* ``python -c`` lines and Python blocks run with the same address
  substitution; they must exit 0.

  docs_examples_test.py REFIT REFITD LIBREFIT_CLIENT_SO PAGE.md...
"""
import json
import os
import random
import re
import shlex
import struct
import subprocess
import sys
import tempfile
import unittest

REFIT, REFITD, LIB = (os.path.abspath(p) for p in sys.argv[1:4])
PAGES = [os.path.abspath(p) for p in sys.argv[4:]]
del sys.argv[1:]
os.environ["REFIT_CLIENT_LIB"] = LIB
import refit  # noqa: E402
import refitd_process  # noqa: E402

PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(refit.__file__)))
ADDRESSES = ("refitd-host:50051", "127.0.0.1:50051")
EXAMPLE_LANGS = ("sh", "python", "c", "c++")
# A refit command in an output listing ("refit plan: error: ..." is output).
OUTPUT_COMMAND = re.compile(r"^refit (plan|simulate|buffers|status|health|models)( |$)")

# (page, start of the line or block) -> why it does not run here.
SKIP = {
    ("README.md", "tools/demo"): "builds with Bazel and runs for minutes; //tests/e2e runs "
                                 "its program",
    ("README.md", "tools/test"): "runs every test of the tree (what CI runs)",
    ("README.md", "import refit\nparams = dict(model.named_parameters())"):
        "a fragment of an engine worker: its model, tp_rank and local_rank; the same loop "
        "runs in //tests/python:refitd_restart_test",
    ("README.md", "vllm serve"): "needs vLLM and GPUs",
    ("README.md", "python -m sglang.launch_server"): "needs SGLang and GPUs",
    ("README.md", "import refit.torch\nm = refit.torch.trainer_member"):
        "a fragment of a trainer: its model, train_step and torch.distributed",
    ("clients.md", "import refit\nparams = dict(model.named_parameters())"):
        "a fragment of an engine worker (see README.md's)",
    ("clients.md", "tools/wheel/wheel.sh"): "builds the wheel for minutes; "
                                            "//tools/wheel:wheel_test builds and installs it",
    ("clients.md", "pip install"): "installs the wheel of the line before",
    ("clients.md", "import torch, torch.distributed as dist"):
        "needs torch, transformers, GPUs and torch.distributed",
    ("clients.md", "rank = torch.distributed.get_rank()"): "a fragment of a Megatron trainer",
    ("clients.md", "refit::MemberOptions o;"): "a fragment of a C++ member (its buffers "
                                              "and deadline); //tests/dataplane's member "
                                              "tests make the same calls",
    ("clients.md", "refit_member* m;"): "a fragment of a C program (its buffers); "
                                        "//client:c_api_test makes the same calls",
    ("engines.md", "tools/wheel/wheel.sh"): "builds the wheel for minutes",
    ("engines.md", "pip install"): "installs the wheel of the line before",
    ("engines.md", "vllm serve"): "needs vLLM and GPUs",
    ("engines.md", "import refit.vllm as rv"): "needs vLLM's HTTP client and a vLLM server; "
                                               "//tests/python:vllm_generations_current_test "
                                               "runs the same calls against a stand-in",
    ("engines.md", "llm = LLM("): "needs vLLM and GPUs",
    ("engines.md", "python -m sglang.launch_server"): "needs SGLang and GPUs",
    ("engines.md", "import refit.sglang as rs, refit.torch"):
        "needs an SGLang engine; //tests/python:sglang_main_test runs the same calls",
    ("engines.md", "REFIT_ASSIGN_OR_RETURN(int64_t v, m->WaitForRound"):
        "a fragment of a C++ engine member; //tests/dataplane:staged_member_test runs these calls",
    ("engines.md", "refit simulate --model=qwen3-8b --checkpoint=/ckpt"):
        "needs the Qwen3-8B checkpoint (16 GB) at /ckpt",
    ("engines.md", "python -m refit.checksums /tmp/sim"): "reads the simulation of the line "
                                                          "before",
    ("engines.md", "curl"): "asks a vLLM server",
    ("gpu-hosts.md", "tools/bundle"): "builds the GPU bundle (CUDA)",
    ("gpu-hosts.md", "dist/refit/"): "runs the bundle on a GPU host",
    ("gpu-hosts.md", "python3 dist/refit/"): "runs the bundle on a GPU host",
    ("gpu-hosts.md", "tools/demo"): "builds with Bazel and runs for minutes",
    ("kernel-layouts.md", "import refit.engine_layouts as el"):
        "a fragment of an engine worker: its live model; //tests/python:engine_layouts_test "
        "runs these calls",
    ("operations.md", "refit_demo --refitd=refitd --member=refit_demo_member_slow"):
        "the demo with its test-only member build, in the background",
    ("operations.md", "refit status --server 127.0.0.1:PORT"):
        "watches the demo of the line before (PORT: the port it prints); "
        "//cli:status_command_test checks the frames",
    ("operations.md", "refit status --server refitd.example:50051"):
        "needs the operator's TLS files (//tests/cli:refit_status_test runs refit status "
        "over TLS)",
}


def examples(page):
    """[(lang, body)] of the page's example blocks (fences may carry a
    language with symbols: c++), and of its unmarked blocks as lang "sh"
    holding only their ``refit`` command lines."""
    with open(page) as f:
        text = f.read()
    out = []
    for lang, body in re.findall(r"^```([^\n`]*)\n(.*?)^```", text, re.S | re.M):
        if lang in EXAMPLE_LANGS:
            out.append((lang, body))
        elif not lang:
            commands = [line for line in shell_lines(body) if OUTPUT_COMMAND.match(line)]
            if commands:
                out.append(("sh", "\n".join(commands)))
    return out


def shell_lines(body):
    joined = re.sub(r"\\\n\s*", " ", body)
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            yield line


def given_optionals(line):
    """``[--a x]`` groups given, ``[a | b]`` as its first alternative."""
    return re.sub(r"\[([^\]]*)\]", lambda m: m.group(1).split("|")[0].strip(), line)


def skip_reason(page, text):
    for (p, start), why in SKIP.items():
        if p == os.path.basename(page) and text.startswith(start):
            return (p, start), why
    return None, None


def write_checkpoint(directory, model):
    """A stand-in checkpoint of ``model``: its trainer tensors at
    fsdp:dp=1 (the checkpoint's names and shapes), finite values, one
    safetensors file."""
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(7)
    header, blobs, offset = {}, [], 0
    names = {"bf16": "BF16", "f32": "F32", "f16": "F16"}
    for b in refit.expected_buffers(side="trainer", rank=0, model=model,
                                    convention="fsdp:dp=1"):
        n = 1
        for d in b.shape:
            n *= d
        if b.dtype == "f32":
            data = struct.pack(f"<{n}f", *(rng.uniform(-1, 1) for _ in range(n)))
        else:  # 16-bit floats of magnitude about 2^-8..2^-1
            data = struct.pack(f"<{n}H", *(0x3b00 + rng.randrange(0x300) |
                                           (0x8000 if rng.random() < 0.5 else 0)
                                           for _ in range(n)))
        header[b.name] = {"dtype": names.get(b.dtype, "BF16"), "shape": list(b.shape),
                          "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def write_pki(cwd, cert, key):
    """A CA (``ca.pem`` in ``cwd``) and a server certificate for 127.0.0.1
    and localhost signed by it, at ``cert`` / ``key``. Raises
    unittest.SkipTest without openssl."""
    def openssl(*args):
        try:
            subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)
        except FileNotFoundError:
            raise unittest.SkipTest("openssl is not installed here")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-days", "1", "-subj", "/CN=ca",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout", "ca.key", "-out", "ca.pem")
    with open(os.path.join(cwd, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    openssl("req", *ec, "-subj", "/CN=refitd", "-keyout", key, "-out", "server.csr")
    openssl("x509", "-req", "-days", "1", "-in", "server.csr", "-CA", "ca.pem",
            "-CAkey", "ca.key", "-CAcreateserial", "-extfile", "server.ext", "-out", cert)


class ShellBlock:
    """A shell block's directory, its token file (written when a line
    names /etc/refit/token) and the refitd one of its lines started, which
    the block's later lines ask."""

    def __init__(self, cwd):
        self.cwd, self.refitd, self._token = cwd, None, None

    def token(self):
        if self._token is None:
            self._token = os.path.join(self.cwd, "token")
            with open(self._token, "w") as f:
                f.write("docs-example-token\n")
        return self._token

    def start_refitd(self, flags):
        """Starts refitd with the line's flags on 127.0.0.1 (a port of its
        choosing instead of the line's --address), its TLS files made
        here."""
        named = dict(f[2:].split("=", 1) for f in flags if f.startswith("--") and "=" in f)
        if "tls_cert" in named:
            write_pki(self.cwd, named["tls_cert"], named["tls_key"])
        flags = [f if not re.match(r"--(tls_cert|tls_key|token_file)=", f)
                 else f.split("=", 1)[0] + "=" + os.path.join(self.cwd, f.split("=", 1)[1])
                 for f in flags if not f.startswith("--address")]
        self.refitd = refitd_process.Refitd(REFITD, *flags)

    def stop(self):
        if self.refitd is not None:
            self.refitd.stop()
            self.refitd = None


class DocsExamplesTest(unittest.TestCase):
    used = set()

    @classmethod
    def tearDownClass(cls):
        stale = set(SKIP) - cls.used
        if stale:
            raise AssertionError(f"SKIP entries no example starts with (remove them): "
                                 f"{sorted(stale)}")

    def run_line(self, page, line, block):
        """Runs one shell line in ``block`` (its directory and the refitd a
        ``refitd`` line of it started); a ``refitd`` line only starts."""
        args = [a for a in shlex.split(given_optionals(line)) if a != "&"]
        if "/etc/refit/token" in line:
            args = [a.replace("/etc/refit/token", block.token()) for a in args]
        if args[0] == "refitd":
            block.start_refitd(args[1:])
            return
        refitd = None
        if any(addr in a for a in args for addr in ADDRESSES):
            refitd = block.refitd
            if refitd is None:
                flags = ["--token_file=" + block.token()] if "/etc/refit/token" in line else []
                refitd = refitd_process.Refitd(REFITD, *flags)
            args = [re.sub("|".join(map(re.escape, ADDRESSES)), refitd.address, a)
                    for a in args]
        if "--checkpoint" in line:
            model = re.search(r"--model[= ](\S+)", line).group(1)
            ckpt = re.search(r"--checkpoint[= ](\S+)", line).group(1)
            write_checkpoint(os.path.join(block.cwd, ckpt), model)
        try:
            exe = REFIT if args[0] == "refit" else sys.executable
            out = subprocess.run([exe] + args[1:], cwd=block.cwd, capture_output=True,
                                 text=True, timeout=300,
                                 env=dict(os.environ, PYTHONPATH=PYTHONPATH))
        finally:
            if refitd is not None and refitd is not block.refitd:
                refitd.stop()
        self.assertEqual(out.returncode, 0, f"{os.path.basename(page)}: {line}\n"
                                            f"{out.stdout[-2000:]}{out.stderr[-2000:]}")

    def run_python(self, page, body, cwd):
        if re.search(r"^import numpy|^import .*\bnumpy\b", body, re.M):
            try:
                import numpy  # noqa: F401
            except ImportError:
                self.skipTest(f"{os.path.basename(page)}: numpy is not installed here")
        refitd = refitd_process.Refitd(REFITD)
        try:
            code = re.sub("|".join(map(re.escape, ADDRESSES)), refitd.address, body)
            out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                                 text=True, timeout=120,
                                 env=dict(os.environ, PYTHONPATH=PYTHONPATH))
        finally:
            refitd.stop()
        self.assertEqual(out.returncode, 0, f"{os.path.basename(page)}:\n{body}\n"
                                            f"{out.stderr[-2000:]}")

    def test_every_example_runs_or_says_why_not(self):
        ran = 0
        for page in PAGES:
            for lang, body in examples(page):
                units = [body] if lang != "sh" else list(shell_lines(body))
                with tempfile.TemporaryDirectory() as cwd:
                    block = ShellBlock(cwd)
                    try:
                        for unit in units:
                            ran += self.run_unit(page, lang, unit, block)
                    finally:
                        block.stop()
        print(f"{ran} examples ran; {len(self.used)} listed in SKIP")
        self.assertGreater(ran, 15)

    def run_unit(self, page, lang, unit, block):
        """1 when ``unit`` (a shell line or a Python block) ran, 0 when
        SKIP lists it; fails the subtest when it neither runs nor is
        listed."""
        key, _ = skip_reason(page, unit)
        with self.subTest(page=os.path.basename(page), example=unit[:60]):
            if key is not None:
                self.used.add(key)
                return 0
            runnable = (lang == "python" or unit.startswith("refit ") or
                        unit.startswith("refitd ") or unit.startswith("python -c "))
            self.assertTrue(runnable, f"{os.path.basename(page)}: {unit!r} "
                                      f"neither runs here nor is in SKIP")
            if lang == "python":
                self.run_python(page, unit, block.cwd)
            else:
                self.run_line(page, unit, block)
        return 1


if __name__ == "__main__":
    unittest.main(verbosity=2)
