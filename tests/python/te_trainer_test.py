"""Megatron trainers whose linear weights are Transformer Engine MXFP8 /
NVFP4 tensors (stand-ins: standin_te/), sharded by GTP, through refit.torch
and a real refitd into vLLM engines of the same format over the host
transport: every engine byte of codes, block scales and global scales
equals the trainer's, TE's padding dropped (checked against the rule below,
written independently of refit's mapping tables); NVFP4's global scale
follows a changed amax in the next round; a reallocated TE storage and
layouts refit does not move are refused naming the parameter.

The rule (Megatron-LM's GTP_remat, TE's allocation): a TP-local weight of
N rows is padded at the tail to a multiple of pad * G rows (pad 32 MXFP8,
16 NVFP4) and cut into G slices of S rows, slice g on GTP rank g; each
slice's scale_inv is [round_up(S, 128), round_up(K / b, 4)], of which rows
< S and columns < K / b are real. The engine's tensor is rows [0, N) of the
slices' concatenation; Megatron's linear_qkv orders rows per query group
(q heads, k, v), vLLM's qkv_proj all q, then all k, then all v.

  te_trainer_test.py REFITD LIBREFIT_CLIENT_SO
"""
import os
import re
import struct
import sys
import threading
import time
import unittest

REFITD, LIB = (os.path.abspath(p) for p in sys.argv[1:3])
del sys.argv[1:3]
os.environ["REFIT_CLIENT_LIB"] = LIB
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "standin_te"))

import refit  # noqa: E402
import refit.torch as rt  # noqa: E402
import standin_torch as st  # noqa: E402
import te_tensors as te  # noqa: E402
from refitd_process import Refitd  # noqa: E402

TIMEOUT = 60.0
# An f32 amax whose amax * f32(1/2688) and amax / 2688 round apart.
AMAX = 13.445080757141113
WIDTH = {"bf16": 2, "f32": 4, "f8e4m3": 1, "u8": 1}
# name, model, trainer, engine, block size, GTP degree, model shape
# (hidden, heads, kv heads, head dim, intermediate, vocab).
CASES = {
    "mxfp8": ("tiny-qwen3-mx", "megatron:tp=1,gtp=4,weights=mxfp8", "vllm:tp=1,quant=mxfp8",
              32, 4, (64, 4, 4, 16, 192, 90)),
    "nvfp4": ("tiny-qwen3-fp4", "megatron:tp=1,gtp=3,weights=nvfp4", "vllm:tp=1,quant=nvfp4",
              16, 3, (64, 4, 4, 24, 160, 90)),
    # TE GroupedLinear experts (weight<j> per local expert) over EP 2, the
    # attention replicated over DP 2: per-expert global scales.
    "nvfp4-moe": ("tiny-qwen3-moe-fp4", "megatron:tp=1,dp=2,ep=2,etp=1,weights=nvfp4",
                  "vllm:tp=1,quant=nvfp4", 16, 2, (64, 4, 4, 24, 160, 64)),
}
EXPERTS, LOCAL_EXPERTS = 4, 2
LINEARS = {"self_attention.linear_qkv": "self_attn.qkv_proj",
           "self_attention.linear_proj": "self_attn.o_proj",
           "mlp.linear_fc1": "mlp.gate_up_proj", "mlp.linear_fc2": "mlp.down_proj"}
NORMS = {"self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
         "mlp.linear_fc1.layer_norm_weight": "post_attention_layernorm.weight",
         "self_attention.q_layernorm.weight": "self_attn.q_norm.weight",
         "self_attention.k_layernorm.weight": "self_attn.k_norm.weight"}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def global_scale(amax):
    """ModelOpt's amax / (6 * 448) as torch computes it on CUDA."""
    return f32(amax * f32(1.0 / 2688.0))


def pattern(seed, n):
    return bytes((seed * 131 + i * 7 + (i >> 8)) % 251 for i in range(n))


def run_all(fns, timeout=TIMEOUT * 2):
    errors = []

    def body(fn):
        try:
            fn()
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)
    ts = [threading.Thread(target=body, args=(f,)) for f in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    if any(t.is_alive() for t in ts):
        raise AssertionError("a member hung")
    if errors:
        raise errors[0]


def trainer_module(specs, fmt, *, wrap=lambda n: "module." + n):
    """A module of stand-in tensors per BufferSpec: a TE tensor reclassed by
    GTP per <param>.weight whose <param>.weight_scale the convention lists,
    bf16 otherwise (the embedding and output layer as BF16 GTP shards).
    Returns it and {param name: tensor}."""
    names = {s.name: s for s in specs}
    params, held = [], {}
    for s in specs:
        if ".weight_scale" in s.name or ".weight_global_scale" in s.name:
            continue
        scale = re.sub(r"\.weight(\d*)$", r".weight_scale\1", s.name)
        if scale != s.name and scale in names:
            shape = list(s.shape)
            if fmt == "nvfp4":
                shape[-1] *= 2
            t = te.gtp_reclass((te.MXFP8Tensor if fmt == "mxfp8" else te.NVFP4Tensor)(shape))
        else:
            t = st.Tensor(s.shape, st.bfloat16 if s.dtype == "bf16" else st.float32)
            if s.name.startswith(("embedding.", "output_layer.")):
                te.gtp_bf16(t)
        held[s.name] = t
        params.append((wrap(s.name), t))
    return st.Module(params), held


def fill(ranks, fmt, version, moe=False):
    """New trainer contents, differing per version and tensor: what ranks
    hold as slices (GTP slices, embedding rows, experts of an EP rank)
    differs per rank; what they replicate (norms; under DP the attention)
    is equal on every rank; one amax per parameter shared by its GTP
    peers, one per expert."""
    for r, held in enumerate(ranks):
        for i, (name, t) in enumerate(sorted(held.items())):
            sliced = ".experts." in name if moe else (
                not isinstance(t, st.Tensor) or name.startswith(("embedding.", "output_layer.")))
            q = r if sliced else 0
            if isinstance(t, st.Tensor):
                ctypes_fill(t, pattern(version * 1000 + i * 10 + q, t.nbytes()))
                continue
            ctypes_fill(t._rowwise_data, pattern(version * 977 + i * 13 + q,
                                                 t._rowwise_data.nbytes()))
            ctypes_fill(t._rowwise_scale_inv,
                        pattern(version * 733 + i * 17 + q, t._rowwise_scale_inv.nbytes()))
            if fmt == "nvfp4":
                expert = r if moe and sliced else 0
                t._amax_rowwise.set_f32([f32(0.37 * (i + 1) + 1.9 * version + 0.01 * expert)])


def ctypes_fill(t, data):
    import ctypes
    ctypes.memmove(t.data_ptr(), data, len(data))


def rows_of(raw, row_bytes, rows):
    return [raw[i * row_bytes:(i + 1) * row_bytes] for i in range(rows)]


def logical_rows(ranks, name, fmt, block, n_rows, k):
    """Rows [0, n_rows) of parameter ``name`` over its GTP slices: (codes
    rows, scale rows), padding dropped."""
    code_row = k if fmt == "mxfp8" else k // 2
    codes, scales = [], []
    for held in ranks:
        t = held[name]
        s = t._rowwise_data.shape[0]
        codes += rows_of(t._rowwise_data.raw(), code_row, s)
        pad_cols = t._rowwise_scale_inv.shape[1]
        scales += [row[:k // block] for row in rows_of(t._rowwise_scale_inv.raw(), pad_cols, s)]
    return codes[:n_rows], scales[:n_rows]


def qkv_to_hf(rows, heads, kv, hd):
    """Megatron's per-group [q heads, k, v] rows as vLLM's [q; k; v]."""
    per = heads // kv
    q, k, v = [], [], []
    for g in range(kv):
        base = g * (per + 2) * hd
        q += rows[base:base + per * hd]
        k += rows[base + per * hd:base + (per + 1) * hd]
        v += rows[base + (per + 1) * hd:base + (per + 2) * hd]
    return q + k + v


def expected_moe(ranks, case):
    """{engine name: bytes} of the attention linears and the experts of the
    MoE case: engine expert e is local expert e % 2 of EP rank e // 2."""
    _, _, _, block, _, (hidden, heads, kv, hd, inter, _) = case
    out = {}
    for layer in (0, 1):
        for mname, n, k in (("linear_qkv", (heads + 2 * kv) * hd, hidden),
                            ("linear_proj", hidden, heads * hd)):
            name = f"decoder.layers.{layer}.self_attention.{mname}.weight"
            codes, scales = logical_rows(ranks[:1], name, "nvfp4", block, n, k)
            if mname == "linear_qkv":
                codes, scales = qkv_to_hf(codes, heads, kv, hd), qkv_to_hf(scales, heads, kv, hd)
            engine = f"model.layers.{layer}.self_attn.{LINEARS['self_attention.' + mname][10:]}"
            out[engine + ".weight"] = b"".join(codes)
            out[engine + ".weight_scale"] = b"".join(scales)
            amax = ranks[0][name]._amax_rowwise.f32()[0]
            out[engine + ".weight_global_scale"] = struct.pack("<f", global_scale(amax))
        for mname, vname, n, k in (("linear_fc1", "w13", 2 * inter, hidden),
                                   ("linear_fc2", "w2", hidden, inter)):
            codes, scales, gs = [], [], []
            for e in range(EXPERTS):
                name = f"decoder.layers.{layer}.mlp.experts.{mname}.weight{e % LOCAL_EXPERTS}"
                one = [ranks[e // LOCAL_EXPERTS]]
                c, sc = logical_rows(one, name, "nvfp4", block, n, k)
                codes += c
                scales += sc
                gs.append(global_scale(one[0][name]._amax_rowwise.f32()[0]))
            engine = f"model.layers.{layer}.mlp.experts.{vname}"
            out[engine + "_weight"] = b"".join(codes)
            out[engine + "_weight_scale"] = b"".join(scales)
            out[engine + "_weight_scale_2"] = struct.pack(f"<{EXPERTS}f", *gs)
    return out


def expected_engine(ranks, fmt, case):
    """{engine name: bytes} of every low-precision tensor, the norms and the
    vocabulary rows of the embedding and the output layer."""
    _, _, _, block, _, (hidden, heads, kv, hd, inter, vocab) = case
    shapes = {"self_attention.linear_qkv": ((heads + 2 * kv) * hd, hidden),
              "self_attention.linear_proj": (hidden, heads * hd),
              "mlp.linear_fc1": (2 * inter, hidden), "mlp.linear_fc2": (hidden, inter)}
    out = {}
    for layer in (0, 1):
        for mname, vname in LINEARS.items():
            n, k = shapes[mname]
            name = f"decoder.layers.{layer}.{mname}.weight"
            codes, scales = logical_rows(ranks, name, fmt, block, n, k)
            if mname.endswith("linear_qkv"):
                codes, scales = qkv_to_hf(codes, heads, kv, hd), qkv_to_hf(scales, heads, kv, hd)
            engine = f"model.layers.{layer}.{vname}"
            out[engine + ".weight"] = b"".join(codes)
            out[engine + ".weight_scale"] = b"".join(scales)
            if fmt == "nvfp4":
                amax = ranks[0][name]._amax_rowwise.f32()[0]
                out[engine + ".weight_global_scale"] = struct.pack("<f", global_scale(amax))
        for mname, vname in NORMS.items():
            out[f"model.layers.{layer}.{vname}"] = ranks[0][f"decoder.layers.{layer}.{mname}"].raw()
    out["model.norm.weight"] = ranks[0]["decoder.final_layernorm.weight"].raw()
    for mname, vname in (("embedding.word_embeddings.weight", "model.embed_tokens.weight"),
                         ("output_layer.weight", "lm_head.weight")):
        out[vname] = b"".join(held[mname].raw() for held in ranks)[:vocab * hidden * 2]
    return out


class TeTrainerTest(unittest.TestCase):
    def rounds(self, key):
        case = CASES[key]
        fmt, moe = key.split("-")[0], key.endswith("-moe")
        model, trainer, engine, _, world = case[:5]
        refitd = Refitd(REFITD)
        self.addCleanup(refitd.stop)
        modules, ranks, members = [], [], []
        for r in range(world):
            specs = refit.expected_buffers(side="trainer", rank=r, model=model,
                                           convention=trainer)
            module, held = trainer_module(specs, fmt)
            modules.append(module)
            ranks.append(held)
        fill(ranks, fmt, 1, moe)
        for r in range(world):
            if fmt == "nvfp4" and not moe:
                # As refit.vllm's trainer path builds it: a Member over a
                # plain dict of module_buffers' tensors.
                bufs = dict(rt.module_buffers(modules[r], rank=r, model=model,
                                              convention=trainer))
                m = refit.Member(server=refitd.address, side="trainer", rank=r, model=model,
                                 convention=trainer, buffers=bufs, timeout=TIMEOUT)
            else:
                m = rt.trainer_member(modules[r], server=refitd.address, rank=r, model=model,
                                      convention=trainer, timeout=TIMEOUT)
            self.addCleanup(m.close)
            members.append(m)
        especs = refit.expected_buffers(side="engine", rank=0, model=model, convention=engine)
        ebufs = {s.name: bytearray(WIDTH[s.dtype] * _numel(s.shape)) for s in especs}
        em = refit.Member(server=refitd.address, side="engine", rank=0, model=model,
                          convention=engine, engine_id="e0", buffers=ebufs, timeout=TIMEOUT)
        self.addCleanup(em.close)
        run_all([lambda m=m: m.prepare(timeout=TIMEOUT) for m in members + [em]])

        def engine_round():
            v = em.wait_for_round(timeout=TIMEOUT)
            em.run_round(v, timeout=TIMEOUT)

        for version in (1, 2):
            if version > 1:
                fill(ranks, fmt, version, moe)  # the optimizer step: codes, scales, amax in place
            run_all([lambda r=r: rt.publish(members[r], version=version, rank=r, world=world,
                                            timeout=TIMEOUT) for r in range(world)]
                    + [engine_round])
            want = expected_moe(ranks, case) if moe else expected_engine(ranks, fmt, case)
            for name, data in want.items():
                if name not in ("model.embed_tokens.weight", "lm_head.weight"):
                    self.assertEqual(len(ebufs[name]), len(data), name)  # else: vocab rows
                got = bytes(ebufs[name][:len(data)])
                self.assertEqual(got, data, f"{key} round {version}: engine {name}")
            moved = [s.name for s in especs if s.dtype != "bf16"]
            self.assertTrue(set(moved) <= set(want), set(moved) - set(want))
        if moe:
            return

        # TE reallocates a weight's storage (clear() and a new quantize):
        # rank 1's publish refuses, naming the parameter, before any barrier,
        # and every other rank's publish fails at once with its reason
        # (not at its 60 s timeout).
        name = "decoder.layers.1.mlp.linear_fc2.weight"
        ranks[1][name]._rowwise_scale_inv.reallocate()
        errors = {}

        def publish3(r):
            try:
                rt.publish(members[r], version=3, rank=r, world=world, timeout=60)
            except refit.RefitError as e:
                errors[r] = e
        began = time.monotonic()
        run_all([lambda r=r: publish3(r) for r in range(world)], timeout=30)
        self.assertLess(time.monotonic() - began, 10)
        self.assertEqual(sorted(errors), list(range(world)))
        why = (f"rank 1: parameter {name} (module name module.{name}): Transformer "
               f"Engine reallocated its _rowwise_scale_inv")
        for r, e in errors.items():
            self.assertEqual(e.code_name, "FAILED_PRECONDITION", f"rank {r}: {e}")
            self.assertIn(why, str(e), f"rank {r}")
        self.assertIn("rank 1 cannot publish version 3", str(errors[0]))
        for r in range(2, world):
            self.assertIn(f"rank {r}: round 3 was not started", str(errors[r]))
        # A tensor object replaced under the attribute is caught the same way.
        held = ranks[0]["decoder.layers.0.self_attention.linear_qkv.weight"]
        held._rowwise_data = te.Tensor(held._rowwise_data.shape)
        with self.assertRaisesRegex(refit.RefitError, "rank 0: parameter decoder.layers.0."
                                    "self_attention.linear_qkv.weight .*reallocated its "
                                    "_rowwise_data"):
            rt.refresh_low_precision(members[0])

    def test_mxfp8_gtp4_into_mxfp8_engine_every_byte_padding_dropped(self):
        self.rounds("mxfp8")

    def test_nvfp4_gtp3_into_nvfp4_engine_global_scale_follows_amax(self):
        self.rounds("nvfp4")

    def test_nvfp4_experts_ep2_per_expert_global_scales(self):
        self.rounds("nvfp4-moe")


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class RegistrationTest(unittest.TestCase):
    """Layouts refit does not move are refused when the buffers are taken,
    naming the rank and the parameter."""

    def refused(self, fmt, change, *, convention=None, only=True):
        model, trainer = CASES[fmt][:2]
        convention = convention or trainer
        specs = refit.expected_buffers(side="trainer", rank=1, model=model, convention=trainer)
        module, held = trainer_module(specs, fmt)
        name = "decoder.layers.0.mlp.linear_fc1.weight"
        module._params = [(n, change(t) if n == "module." + name else t)
                          for n, t in module._params]
        with self.assertRaises(refit.RefitError) as e:
            rt.module_buffers(module, rank=1, model=model, convention=convention)
        self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
        msg = str(e.exception)
        self.assertIn(f"rank 1: parameter {name} (module name module.{name}): ", msg)
        if only:
            self.assertEqual(len(msg.splitlines()), 1, msg)  # that parameter, once
        return msg

    def test_columnwise_only_is_refused(self):
        msg = self.refused("mxfp8", lambda t: te.MXFP8Tensor(t.shape, rowwise=False))
        self.assertIn("holds no rowwise data (a columnwise-only copy)", msg)

    def test_gemm_swizzled_scales_are_refused(self):
        def swizzled(t):
            t._with_gemm_swizzled_scales = True
            return t
        self.assertIn("GEMM-swizzled layout", self.refused("nvfp4", swizzled))

    def test_e5m2_codes_are_refused(self):
        msg = self.refused("mxfp8", lambda t: te.MXFP8Tensor(
            t.shape, fp8_dtype=te.DType.kFloat8E5M2))
        self.assertIn("holds e5m2 codes", msg)

    def test_nvfp4_without_amax_is_refused(self):
        def no_amax(t):
            t._amax_rowwise = None
            return t
        self.assertIn("holds no _amax_rowwise", self.refused("nvfp4", no_amax))

    def test_per_tensor_fp8_is_refused(self):
        msg = self.refused("mxfp8", lambda t: te.Float8Tensor(t.shape))
        self.assertIn("a Transformer Engine Float8Tensor; refit moves TE's MXFP8Tensor and "
                      "NVFP4Tensor", msg)

    def test_mxfp8_tensor_under_an_nvfp4_convention_is_refused(self):
        specs = refit.expected_buffers(side="trainer", rank=0, model="tiny-qwen3-fp4",
                                       convention="megatron:tp=1,gtp=3,weights=nvfp4")
        module, held = trainer_module(specs, "nvfp4")
        name = "decoder.layers.0.mlp.linear_fc2.weight"
        module._params = [(n, te.MXFP8Tensor([32, 160]) if n == "module." + name else t)
                          for n, t in module._params]
        with self.assertRaisesRegex(refit.RefitError, f"rank 0: parameter {name} .*a "
                                    f"Transformer Engine MXFP8 tensor; convention megatron:"
                                    f"tp=1,gtp=3,weights=nvfp4 holds this weight as NVFP4"):
            rt.module_buffers(module, rank=0, model="tiny-qwen3-fp4",
                              convention="megatron:tp=1,gtp=3,weights=nvfp4")

    def test_te_tensor_under_a_bf16_convention_is_refused(self):
        msg = self.refused("mxfp8", lambda t: t, convention="megatron:tp=1,gtp=4",
                           only=False)
        self.assertIn("a Transformer Engine MXFP8 tensor; convention megatron:tp=1,gtp=4 "
                      "holds this weight as bf16 (weights=model)", msg)

    def test_buffers_are_te_storage_and_global_scale_is_refits(self):
        model, trainer = CASES["nvfp4"][:2]
        specs = refit.expected_buffers(side="trainer", rank=2, model=model, convention=trainer)
        module, held = trainer_module(specs, "nvfp4")
        name = "decoder.layers.1.mlp.linear_fc1"
        t = held[name + ".weight"]
        t._amax_rowwise.set_f32([AMAX])
        got = rt.module_buffers(module, rank=2, model=model, convention=trainer)
        self.assertIs(got[name + ".weight"], t._rowwise_data)
        self.assertIs(got[name + ".weight_scale"], t._rowwise_scale_inv)
        gs = got[name + ".weight_global_scale"]
        self.assertEqual(gs.shape, ())
        self.assertEqual(gs.f32(), [global_scale(AMAX)])
        self.assertNotEqual(global_scale(AMAX), f32(AMAX / 2688.0))  # the rounding matters
        t._amax_rowwise.set_f32([0.0])
        rt.refresh_low_precision(got)
        self.assertEqual(gs.f32(), [0.0])
        self.assertEqual(len(got.low_precision), 8)


if __name__ == "__main__":
    unittest.main()
