"""refit.checksums end to end: a checkpoint refitted by a real refitd round
into two vLLM workers (refit.vllm's worker extension), whose checksums in
vLLM's weight-checker form equal an independent SHA-256 of the workers'
tensors and the expected values the trainer side computes from the same
checkpoint with `refit simulate` (Python API and `python -m refit.checksums`);
and into an SGLang server of the session line (standin_sglang/sessions),
whose own end_weight_update accepts refit simulate's expected values in
SGLang's form and refuses them for another checkpoint.

  checksums_test.py REFITD LIBREFIT_CLIENT_TESTING_SO REFIT_CLI
"""
import hashlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import types
import unittest
from contextlib import redirect_stdout

REFITD, LIB, CLI = (os.path.abspath(p) for p in sys.argv[1:4])
del sys.argv[1:4]
os.environ["REFIT_CLIENT_LIB"] = LIB
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "standin_sglang", "sessions"))

import refit  # noqa: E402
import refit.checksums as rc  # noqa: E402
import refit.testing as rtest  # noqa: E402
rtest.load_library()
import refit.torch  # noqa: E402
import refit.sglang as rs  # noqa: E402
import refit.vllm as rv  # noqa: E402
import standin_torch as st  # noqa: E402
from concurrently import run_all  # noqa: E402
from refitd_process import Refitd  # noqa: E402
from sglang.srt.managers.scheduler import Engine as SglangEngine  # noqa: E402

TIMEOUT = 60.0
MODEL = "tiny-qwen3"
TRAINER = "fsdp:dp=1"
ENGINE = "vllm:tp=2"
_ST_DTYPES = {"bf16": "BF16", "fp32": "F32", "f32": "F32"}


def write_safetensors(path, specs, tensors):
    """A safetensors file of ``tensors`` ({name: st.Tensor}) in spec order."""
    header, blobs, at = {}, [], 0
    for s in specs:
        raw = tensors[s.name].raw()
        header[s.name] = {"dtype": _ST_DTYPES[s.dtype], "shape": list(s.shape),
                          "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class Worker(rv.RefitWorkerExtension):
    """A vLLM worker with the extension mixed in, over a zeroed model."""

    def __init__(self, rank):
        self.model_runner = types.SimpleNamespace(model=zeroed(ENGINE, rank))
        self.vllm_config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(
            rank=rank, world_size=2, tensor_parallel_size=2, data_parallel_size=1,
            data_parallel_index=0))
        self.device = "cpu"


def zeroed(convention, rank):
    """A module of the engine rank's parameters, all bytes zero (as an
    engine's padding rows stay where refit writes none)."""
    specs = refit.expected_buffers(side="engine", rank=rank, model=MODEL,
                                   convention=convention)
    return st.Module([(s.name, st.Tensor(s.shape, st.bfloat16 if s.dtype == "bf16"
                                         else st.float32)) for s in specs])


class ChecksumsTest(unittest.TestCase):
    def setUp(self):
        self.refitd = Refitd(REFITD)
        self.addCleanup(self.refitd.stop)
        rv.layout_hooks = (lambda m: None, lambda m: None)
        self.addCleanup(setattr, rv, "layout_hooks", None)
        self.tmp = tempfile.mkdtemp()

    def trainer(self):
        """The one trainer rank: its specs, its buffers, its member."""
        specs = refit.expected_buffers(side="trainer", rank=0, model=MODEL,
                                       convention=TRAINER)
        _, local = st.module_from_specs(specs)
        member = refit.Member(server=self.refitd.address, side="trainer", rank=0,
                              model=MODEL, convention=TRAINER, buffers=local,
                              timeout=TIMEOUT)
        self.addCleanup(member.close)
        return specs, local, member

    def test_engine_checksums_match_hashlib_and_refit_simulate(self):
        specs, local, member = self.trainer()
        workers = [Worker(0), Worker(1)]
        init = {"server": self.refitd.address, "engine_id": "e0", "model": MODEL,
                "convention": ENGINE, "timeout": TIMEOUT}
        run_all([lambda w=w: w.refit_init(init) for w in workers]
                + [lambda: member.prepare(timeout=TIMEOUT)])
        rtest.fill_pattern(member, 1)
        per_rank = self.simulate(specs, local, ENGINE, "sim")

        run_all([lambda: workers[0].refit_update([{"version": 1, "timeout": TIMEOUT}] * 2),
                 lambda: workers[1].refit_update({"version": 1, "timeout": TIMEOUT}),
                 lambda: refit.torch.publish(member, version=1, rank=0, world=1,
                                             timeout=TIMEOUT)])
        engine = {}
        for w in workers:
            engine.update(w.refit_checksums())
        independent = {}
        for k, w in enumerate(workers):
            for n, p in w.model_runner.model.named_parameters():
                independent[f"dp0:pp0:pcp0:tp{k}:ep0:{n}"] = hashlib.sha256(p.raw()).hexdigest()
        self.assertEqual(engine, independent)

        expected = rc.vllm_form(per_rank, ENGINE)
        self.assertEqual(set(expected), set(engine))
        self.assertEqual(rc.mismatches(expected, engine), [])
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(rc.main([os.path.join(self.tmp, "sim"), f"--convention={ENGINE}",
                                      "--form=vllm"]), 0)
        self.assertEqual(json.loads(out.getvalue()), expected)

        # One byte off in the engine: exactly that tensor is named.
        name = "model.norm.weight"
        p = dict(workers[1].model_runner.model.named_parameters())[name]
        p._mem[0] = bytes([p._mem[0][0] ^ 1])
        after = {}
        for w in workers:
            after.update(w.refit_checksums())
        self.assertEqual(rc.mismatches(expected, after), [f"dp0:pp0:pcp0:tp1:ep0:{name}"])
        for w in workers:
            w.refit_shutdown()

    def simulate(self, specs, local, engine, name):
        """refit simulate of the trainer's buffers as a checkpoint."""
        ckpt = os.path.join(self.tmp, f"{name}.safetensors")
        write_safetensors(ckpt, specs, local)
        sim = os.path.join(self.tmp, name)
        subprocess.run([CLI, "simulate", f"--model={MODEL}", f"--checkpoint={ckpt}",
                        f"--trainer={TRAINER}", f"--engine={engine}", f"--out={sim}"],
                       check=True, capture_output=True, text=True)
        return rc.from_simulation(sim)

    def test_sglang_end_weight_update_checks_refit_simulates_values(self):
        conv = "sglang:tp=2"
        rs.layout_hooks = (lambda m: None, lambda m: None)
        rs.empty_tensor = lambda: None
        self.addCleanup(setattr, rs, "layout_hooks", None)
        self.addCleanup(setattr, rs, "empty_tensor", None)
        self.addCleanup(rs._receivers.clear)
        specs, local, member = self.trainer()
        engine = SglangEngine([zeroed(conv, 0), zeroed(conv, 1)],
                              custom_weight_loader=[rs.LOADER])
        rs.join_engine(engine, member, server=self.refitd.address, engine_id="s0",
                       model=MODEL, convention=conv, timeout=TIMEOUT)
        rtest.fill_pattern(member, 1)
        expected = rc.sglang_form(self.simulate(specs, local, conv, "v1"), conv)
        got = rs.sync_weights(engine, member, engine_id="s0", version=1, rank=0, world=1,
                              timeout=TIMEOUT, checksums=True, expected_checksums=expected)
        self.assertEqual(rc.sglang_form(got, conv), expected)
        self.assertEqual(engine.scheduler.weight_version, "1")
        # Values of another checkpoint: SGLang itself refuses the update.
        rtest.fill_pattern(member, 2)
        with self.assertRaisesRegex(refit.FailedPreconditionError,
                                    "SGLang refused end_weight_update: checksum mismatch"):
            rs.sync_weights(engine, member, engine_id="s0", version=2, rank=0, world=1,
                            timeout=TIMEOUT, expected_checksums=expected)
        self.assertEqual(engine.scheduler.weight_version, "1")
        rs.leave_engine(engine, engine_id="s0")

    def test_sglang_form_is_one_manifest_per_replica(self):
        per_rank = {0: {"a": "0"}, 1: {"a": "1"}, 2: {"a": "2"}, 3: {"a": "3"}}
        self.assertEqual(rc.sglang_form(per_rank, "sglang:tp=2,dp=2"),
                         [{"0": {"a": "0"}, "1": {"a": "1"}},
                          {"0": {"a": "2"}, "1": {"a": "3"}}])
        with self.assertRaisesRegex(refit.InvalidArgumentError, "engine rank 4 is outside"):
            rc.sglang_form({4: {}}, "sglang:tp=2,dp=2")
        self.assertEqual(rc.vllm_form({3: {"model.layers.0.mlp.experts.w13_weight": "x"}},
                                      "vllm:tp=2,dp=2"),
                         {"dp1:pp0:pcp0:tp1:ep3:model.layers.0.mlp.experts.w13_weight": "x"})

    def test_simulation_without_engine_ranks_is_named(self):
        with self.assertRaisesRegex(refit.NotFoundError, "no engine rank<k>.safetensors"):
            rc.from_simulation(self.tmp)


if __name__ == "__main__":
    unittest.main()
