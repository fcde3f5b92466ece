"""refit.vllm into vLLM engines holding MXFP8 and NVFP4 weights, as users run
it: the stand-in vLLM (standin_vllm/current) builds each worker's Qwen3 with
vLLM's quantization methods (the ModelOpt NVFP4 linear and MoE methods
with the emulation, CUTLASS and FlashInfer CUTLASS kernels; the online
MXFP8 linear method), their parameters as vLLM creates and post-processes
them; the worker registers with the engine convention "vllm:tp=1" alone and
refit.vllm adds the detected quant= and kernel=; an FSDP trainer of two
ranks sends BF16 weights through vLLM's trainer factory. After each round
every engine byte equals lowp_reference.py's statement of vLLM's bytes
(codes, block scales, swizzled where the kernel reads them so, global
scales), the plan refitd builds for the detected convention is the one
`refit plan` builds for it (the same fingerprint, so the same conversions
to the same formats), the NVFP4 alphas are recomputed from the new global
scales, and
what refit does not write is refused at registration by name (vLLM's
online NVFP4 experts, shuffled for FlashInfer TRTLLM or CuteDSL, among
them).

  vllm_lowp_test.py REFITD LIBREFIT_CLIENT_SO REFIT_CLI
"""
import ctypes
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import types
import unittest

REFITD, LIB, REFIT = (os.path.abspath(p) for p in sys.argv[1:4])
del sys.argv[1:4]
os.environ["REFIT_CLIENT_LIB"] = LIB
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "standin_vllm", "current"))

import refit  # noqa: E402
import refit.vllm as rv  # noqa: E402
import lowp_reference as ref  # noqa: E402
import standin_torch as st  # noqa: E402
from concurrently import run_all  # noqa: E402
from refitd_process import Refitd  # noqa: E402
from vllm.distributed.weight_transfer import factory  # noqa: E402
from vllm.model_executor.layers.quantization import modelopt as mo  # noqa: E402
from vllm.model_executor.layers.quantization.online import mxfp8 as mx  # noqa: E402
from vllm.model_executor.layers.quantization.online import nvfp4 as nv  # noqa: E402
from vllm.model_executor.layers.linear import UnquantizedLinearMethod  # noqa: E402
from vllm.v1.worker.gpu_worker import LLM, Worker  # noqa: E402

TIMEOUT = 60.0
TRAINER = "fsdp:dp=2"
FUSED = {"self_attn.qkv_proj": ("q_proj", "k_proj", "v_proj"),
         "mlp.gate_up_proj": ("gate_proj", "up_proj")}
LINEARS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
INPUT_SCALE = 0.0125  # the engine's activation calibration (ModelOpt's input_scale)


def bf16(x):
    """x rounded to BF16."""
    return ref.bf16_rows(ref.to_bf16(x), 1)[0][0]


def hf_shapes(model):
    """{HF name: shape} of the whole model (the fsdp:dp=1 trainer's)."""
    return {b.name: list(b.shape) for b in refit.expected_buffers(
        side="trainer", rank=0, model=model, convention="fsdp:dp=1")}


def engine_model(model, linear_method, moe_method):
    """A vLLM Qwen3 as the worker holds it: every BF16 engine buffer of
    "vllm:tp=1" as a parameter, the linear layers and experts created and
    post-processed by the quantization methods (fresh ones per layer)."""
    hf = hf_shapes(model)
    root = st.Layer()
    for b in refit.expected_buffers(side="engine", rank=0, model=model, convention="vllm:tp=1"):
        path, _, leaf = b.name.rpartition(".")
        tail = ".".join(path.split(".")[3:])
        if tail in LINEARS:
            layer = root.child(path)
            method = linear_method()
            parts = [hf[path.replace(tail, tail.rsplit(".", 1)[0] + "." + p) + ".weight"][0]
                     for p in FUSED[tail]] if tail in FUSED else [b.shape[0]]
            method.create_weights(layer, b.shape[1], parts)
            layer.quant_method = method
        elif leaf == "w13_weight":
            layer = root.child(path)
            method = moe_method()
            e, two_i, h = b.shape
            method.create_weights(layer, e, h, two_i // 2)
            layer.quant_method = method
        elif leaf == "w2_weight":
            continue
        else:
            setattr(root.child(path), leaf, st.Tensor(b.shape, st.bfloat16))
    for _, layer in list(root.named_modules()):
        qm = getattr(layer, "quant_method", None)
        if qm is None:
            continue
        for name in ("input_scale", "w13_input_scale", "w2_input_scale"):
            t = getattr(layer, name, None)
            if t is not None:
                t.set_values([INPUT_SCALE] * t.numel())
        qm.process_weights_after_loading(layer)
    return root


class Trainer:
    """The BF16 weights of the whole model (seeded normals rounded to BF16)
    and the two FSDP ranks' modules holding their row chunks."""

    def __init__(self, model, seed):
        rnd = random.Random(seed)
        self.full = {n: [[bf16(rnd.gauss(0, 0.02)) for _ in range(s[1] if len(s) > 1 else 1)]
                         for _ in range(s[0])]
                     for n, s in hf_shapes(model).items()}
        self.sources = []
        for r in (0, 1):
            want = refit.expected_buffers(side="trainer", rank=r, model=model, convention=TRAINER)
            module, local = st.module_from_specs(want, wrap=lambda n: "module." + n,
                                                 dtensor_world=2)
            self.sources.append((rv.RefitSource(module, rank=r, model=model,
                                                convention=TRAINER), local))
        self.write()

    def write(self):
        for r, (_, local) in enumerate(self.sources):
            for name, t in local.items():
                rows = self.full[name]
                chunk = -(-len(rows) // 2)
                mine = rows[r * chunk:(r + 1) * chunk]
                raw = b"".join(ref.to_bf16(x) for row in mine for x in row)
                ctypes.memmove(t.data_ptr(), raw, len(raw))

    def step(self, seed):
        """Every weight moves, as an optimizer step would."""
        rnd = random.Random(seed)
        for rows in self.full.values():
            for row in rows:
                for i, x in enumerate(row):
                    row[i] = bf16(x + rnd.gauss(0, 0.002))
        self.write()


class LowPrecisionEngineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rv.register()

    def setUp(self):
        self.refitd = Refitd(REFITD)
        self.addCleanup(self.refitd.stop)

    def join(self, model, engine, trainer, convention="vllm:tp=1"):
        pc = types.SimpleNamespace(rank=0, world_size=1, tensor_parallel_size=1,
                                   pipeline_parallel_size=1, data_parallel_size=1,
                                   data_parallel_rank=0, data_parallel_index=0)
        worker = Worker(backend="refit", parallel_config=pc, model=engine)
        llm = LLM([worker])
        engines = [None, None]

        def init(r):
            info = rv.RefitTrainerInitInfo(rank=r, server=self.refitd.address, world=2,
                                           model=model, convention=TRAINER, engine_id="e0",
                                           engine_convention=convention, timeout=TIMEOUT)
            engines[r] = factory.WeightTransferTrainerFactory.trainer_init(
                init_info=info, client=llm if r == 0 else None, source=trainer.sources[r][0])
        run_all([lambda r=r: init(r) for r in (0, 1)])
        self.addCleanup(lambda: [w.shutdown() for w in (worker,)])
        self.addCleanup(lambda: [e.shutdown() for e in engines if e])
        return worker, engines

    def check(self, model, engine, trainer, quant, kernel):
        """Every quantized layer's bytes and scales, and every BF16 tensor."""
        full = trainer.full
        checked = 0
        for path, layer in engine.named_modules():
            if getattr(layer, "quant_method", None) is None:
                continue
            tail = ".".join(path.split(".")[3:])
            if hasattr(layer, "w13_weight"):
                base = path + "."
                experts = layer.w13_weight.shape[0]
                order = ("up_proj", "gate_proj") if kernel == "flashinfer" else (
                    "gate_proj", "up_proj")
                for w, names in (("w13", order), ("w2", ("down_proj",))):
                    parts = [[full[f"{base}{x}.{p}.weight"] for p in names]
                             for x in range(experts)]
                    self.check_matrices(path, layer, w + "_", parts, quant, kernel, moe=True)
            else:
                names = FUSED.get(tail)
                parts = [[full[path.replace(tail, tail.rsplit(".", 1)[0] + "." + p) + ".weight"]
                          for p in names]] if names else [[full[path + ".weight"]]]
                self.check_matrices(path, layer, "", parts, quant, kernel, moe=False)
            checked += 1
        for name, t in engine.named_parameters():
            if name in full and t.dtype is st.bfloat16:
                want = b"".join(ref.to_bf16(x) for row in full[name] for x in row)
                self.assertEqual(t.raw()[:len(want)], want, name)
        return checked

    def check_matrices(self, path, layer, prefix, matrices, quant, kernel, moe):
        codes, scales, globals_ = b"", b"", []
        for parts in matrices:
            rows = [row for p in parts for row in p]
            if quant == "mxfp8":
                c, s = ref.mxfp8(rows)
                if kernel == "flashinfer":
                    s = ref.swizzle(s, len(rows), len(rows[0]) // 32)
            else:
                g = ref.nvfp4_global(ref.amax(parts))
                c, s = ref.nvfp4(rows, g)
                if kernel == "flashinfer":
                    s = ref.swizzle(s, len(rows), len(rows[0]) // 16)
                    if not moe:
                        c = ref.pad_codes(c, len(rows), len(rows[0]) // 2)
                globals_.append(g)
            codes, scales = codes + c, scales + s
        self.assertEqual(getattr(layer, prefix + "weight").raw(), codes, f"{path} {prefix}weight")
        self.assertEqual(getattr(layer, prefix + "weight_scale").raw(), scales,
                         f"{path} {prefix}weight_scale")
        if quant != "nvfp4":
            return
        if not moe:
            self.assertEqual(layer.weight_global_scale.values(), globals_, path)
            self.assertEqual(layer.alpha.values(), [ref.f32(ref.f32(INPUT_SCALE) * globals_[0])], path)
            return
        held = getattr(layer, prefix + "weight_scale_2")
        # FlashInfer CUTLASS folds the input scale into it (g1_alphas is it).
        want = ([ref.f32(ref.f32(INPUT_SCALE) * g) for g in globals_] if kernel == "flashinfer"
                else [ref.f32(g) for g in globals_])
        self.assertEqual(held.values(), want, f"{path} {prefix}weight_scale_2")
        self.assertIs(getattr(layer.quant_method.moe_quant_config,
                              "g1_alphas" if prefix == "w13_" else "g2_alphas"), held)

    def cli_fingerprint(self, model, convention):
        """The fingerprint of `refit plan` for the FSDP trainer and an engine
        of `convention`, every rank on this host (as the members say)."""
        host = socket.gethostname()
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as hosts:
            hosts.write(f"trainer 0 {host}\ntrainer 1 {host}\nengine 0 {host}\n")
            hosts.flush()
            out = subprocess.run([REFIT, "plan", f"--model={model}", f"--trainer={TRAINER}",
                                  f"--engine={convention}", f"--hosts={hosts.name}", "--json"],
                                 capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)["fingerprint"]

    def rounds(self, model, linear_method, moe_method, quant, kernel, steps=2):
        engine = engine_model(model, linear_method, moe_method)
        trainer = Trainer(model, 7)
        worker, engines = self.join(model, engine, trainer)
        receiver = worker.weight_transfer_engine.receiver
        self.assertEqual(receiver.quant, quant)
        self.assertEqual(receiver.kernel, kernel)
        self.assertIn(f"quant={quant}", receiver.convention)
        # The worker registered "vllm:tp=1" and its layers' format; refitd's
        # plan is `refit plan`'s for the detected convention (its tensors'
        # formats, its conversions), and not the BF16 engine's.
        member = worker.weight_transfer_engine.member
        self.assertEqual(member.info.fingerprint, self.cli_fingerprint(model, receiver.convention))
        self.assertNotEqual(member.info.fingerprint, self.cli_fingerprint(model, "vllm:tp=1"))
        for v in range(1, steps + 1):
            if v > 1:
                trainer.step(v)
            run_all([e.send_weights for e in engines])
            self.assertEqual(worker.weight_transfer_engine.version, v)
            self.assertGreater(self.check(model, engine, trainer, quant, kernel), 0)

    def test_nvfp4_dense_emulation_every_byte_and_alpha(self):
        self.rounds("tiny-qwen3-fp4", lambda: mo.ModelOptNvFp4LinearMethod(
            mo.EmulationNvFp4LinearKernel()), None, "nvfp4", None)

    def test_nvfp4_dense_cutlass_swizzled_scales(self):
        self.rounds("tiny-qwen3-fp4-fi", lambda: mo.ModelOptNvFp4LinearMethod(
            mo.CutlassNvFp4LinearKernel()), None, "nvfp4", "flashinfer", steps=1)

    def test_nvfp4_dense_cutlass_padded_weights_and_scales(self):
        # q, k, v of 96 rows, o_proj K 96 (6 scale columns), down_proj K 160:
        # every scale matrix padded to whole 128 x 4 tiles.
        self.rounds("tiny-qwen3-fp4", lambda: mo.ModelOptNvFp4LinearMethod(
            mo.CutlassNvFp4LinearKernel()), None, "nvfp4", "flashinfer", steps=1)

    def test_nvfp4_moe_flashinfer_cutlass_w31_swizzled_folded_alphas(self):
        self.rounds("tiny-qwen3-moe-fp4-fi",
                    lambda: mo.ModelOptNvFp4LinearMethod(mo.CutlassNvFp4LinearKernel()),
                    lambda: mo.ModelOptNvFp4FusedMoE(mo.NvFp4MoeBackend.FLASHINFER_CUTLASS),
                    "nvfp4", "flashinfer", steps=1)

    def test_nvfp4_moe_emulation_keeps_the_global_scales(self):
        self.rounds("tiny-qwen3-moe-fp4",
                    lambda: mo.ModelOptNvFp4LinearMethod(mo.EmulationNvFp4LinearKernel()),
                    lambda: mo.ModelOptNvFp4FusedMoE(mo.NvFp4MoeBackend.EMULATION),
                    "nvfp4", None, steps=1)

    def test_mxfp8_dense_flashinfer_cutlass_flat_swizzled_scales(self):
        # FlashInfer CUTLASS linears: flat [Mp * Kp] E8M0 scales; tiny-qwen3-mx's
        # parts (64 rows, 2 to 6 scale columns) pad to whole tiles.
        self.rounds("tiny-qwen3-mx", lambda: mx.Mxfp8OnlineLinearMethod(
            mx.FlashInferCutlassMxfp8LinearKernel()), None, "mxfp8", "flashinfer", steps=1)

    def test_mxfp8_dense_emulation_every_byte(self):
        self.rounds("tiny-qwen3-mx", lambda: mx.Mxfp8OnlineLinearMethod(
            mx.EmulationMxfp8LinearKernel()), None, "mxfp8", None)

    def refused(self, model, engine, *says, convention="vllm:tp=1"):
        pc = types.SimpleNamespace(rank=0, world_size=1, tensor_parallel_size=1,
                                   pipeline_parallel_size=1, data_parallel_size=1,
                                   data_parallel_rank=0, data_parallel_index=0)
        worker = Worker(backend="refit", parallel_config=pc, model=engine)
        with self.assertRaises(refit.RefitError) as cm:
            worker.init_weight_transfer_engine({"server": self.refitd.address,
                                                "engine_id": "e0", "model": model,
                                                "convention": convention, "timeout": 5.0})
        self.assertEqual(cm.exception.code_name, "INVALID_ARGUMENT")
        for s in says:
            self.assertIn(s, cm.exception.message)
        self.assertIsNone(worker.weight_transfer_engine.member)

    def test_what_refit_does_not_write_is_refused_by_name(self):
        model = "tiny-qwen3-mx"
        self.refused(model, engine_model(model, lambda: mx.Mxfp8OnlineLinearMethod(
            mx.EmulationMxfp8LinearKernel(dequant_at_load=True)), None),
            "model.layers.0.self_attn.qkv_proj", "VLLM_MXFP8_EMULATION_DEQUANT_AT_LOAD=0")
        model = "tiny-qwen3-fp4"
        self.refused(model, engine_model(model, mo.ModelOptNvFp4W4A16LinearMethod, None),
                     "model.layers.0.self_attn.qkv_proj", "W4A16", "Marlin")
        ok = engine_model(model, lambda: mo.ModelOptNvFp4LinearMethod(
            mo.EmulationNvFp4LinearKernel()), None)
        self.refused(model, ok, "quant=mxfp8, but the worker's layers hold nvfp4",
                     convention="vllm:tp=1,quant=mxfp8")

    def test_online_nvfp4_experts_are_refused_by_name_whatever_the_convention(self):
        # --quantization nvfp4_per_token: vLLM quantized the experts itself
        # and holds them for FlashInfer TRTLLM (or CuteDSL), shuffled; refit
        # reads the recipe off the layers but writes that recipe's bytes in
        # the checkpoint layout only.
        import refit.engine_formats as ef
        model = "tiny-qwen3-moe-fp4"
        for backend in nv.NvFp4MoeBackend:
            engine = engine_model(model, UnquantizedLinearMethod,
                                  lambda b=backend: nv.Nvfp4OnlineMoEMethod(b))
            self.assertEqual(ef.vllm_nvfp4_recipe(engine), "vllm")
            for convention in ("vllm:tp=1", "vllm:tp=1,quant=nvfp4,recipe=vllm"):
                self.refused(model, engine, "layer model.layers.0.mlp.experts",
                             "Nvfp4OnlineMoEMethod", f"{backend.name} here", "shuffled",
                             convention=convention)


if __name__ == "__main__":
    unittest.main()
