"""refit.engine_layouts on stand-ins of vLLM's and SGLang's live layers
(standin_engine_layers.py) and a pure-Python strided tensor
(standin_tensor.py): every detection branch (the kernel= value, or the
refusal naming the layer, the kernel and the setting that avoids it), and
MLA's derived tensors after a commit: the attention computed from the
refreshed engine tensors equals the one computed from tensors derived
from scratch, and differs before the refresh."""

import math
import os
import random
import unittest

import refit
import refit.engine_formats as ef
import refit.engine_worker as ew
import refit.engine_layouts as el
import standin_engine_layers as S
import standin_tensor as T


class VllmKernelLayoutTest(unittest.TestCase):
    def refused(self, model, *says):
        with self.assertRaises(refit.RefitError) as cm:
            el.vllm_kernel_layout(model)
        self.assertEqual(cm.exception.code_name, "INVALID_ARGUMENT")
        for s in says:
            self.assertIn(s, cm.exception.message)
        return cm.exception.message

    def test_checkpoint_layouts_give_none(self):
        m = S.Model([
            ("model.layers.0.self_attn.qkv_proj", S.fp8_linear(S.float_scales(2))),
            ("model.layers.0.mlp.experts",
             S.fp8_moe(S.float_scales(4), S.Fp8MoEMethod(fp8_backend=S.Fp8MoeBackend.TRITON))),
            ("model.layers.1.mlp.experts",
             S.bf16_moe(S.UnquantizedFusedMoEMethod(S.UnquantizedMoeBackend.TRITON))),
            ("model.layers.1.mlp.down_proj", S.Layer(quant_method=S.UnquantizedLinearMethod())),
        ])
        self.assertIsNone(el.vllm_kernel_layout(m))
        # DeepGEMM with float scales (VLLM_USE_DEEP_GEMM_E8M0=0) reads the
        # checkpoint layout too.
        m = S.Model([("l0.qkv_proj", S.fp8_linear(
            S.float_scales(2), kernel=S.DeepGemmFp8BlockScaledMMKernel(e8m0=False)))])
        self.assertIsNone(el.vllm_kernel_layout(m))

    def test_flashinfer_cutlass_moe_bf16_and_block_fp8(self):
        bf16 = S.Model([("model.layers.0.mlp.experts", S.bf16_moe(
            S.UnquantizedFusedMoEMethod(S.UnquantizedMoeBackend.FLASHINFER_CUTLASS)))])
        self.assertEqual(el.vllm_kernel_layout(bf16), "flashinfer")
        older = S.Model([("model.layers.0.mlp.experts", S.bf16_moe(
            S.UnquantizedFusedMoEMethod(flashinfer_cutlass_moe_enabled=True)))])
        self.assertEqual(el.vllm_kernel_layout(older), "flashinfer")
        fp8 = S.Model([
            ("model.layers.0.self_attn.o_proj", S.fp8_linear(S.float_scales(2))),
            ("model.layers.0.mlp.experts", S.fp8_moe(S.float_scales(4), S.Fp8MoEMethod(
                flashinfer_moe_backend=S.FlashinferMoeBackend.CUTLASS)))])
        self.assertEqual(el.vllm_kernel_layout(fp8), "flashinfer")
        # Behind a modular kernel, the experts' class says it.
        modular = S.Model([("model.layers.0.mlp.experts", S.bf16_moe(S.FusedMoEModularMethod(
            S.UnquantizedFusedMoEMethod(), S.FlashInferExperts())))])
        self.assertEqual(el.vllm_kernel_layout(modular), "flashinfer")

    def test_deepgemm_ue8m0_requantized_linear_and_moe(self):
        m = S.Model([
            ("model.layers.0.self_attn.o_proj", S.fp8_linear(
                S.pow2_scales(2), kernel=S.DeepGemmFp8BlockScaledMMKernel())),
            ("model.layers.0.mlp.experts", S.fp8_moe(S.pow2_scales(4), S.Fp8MoEMethod(
                fp8_backend=S.Fp8MoeBackend.DEEPGEMM))),
        ])
        self.assertEqual(el.vllm_kernel_layout(m), "deepgemm")

    def test_deepgemm_sm100_int32_packed_scales(self):
        def packed(shape):
            n = 1
            for d in shape:
                n *= d
            return T.Tensor.of([0] * n, shape, T.int32)
        linear = S.fp8_linear(S.pow2_scales(2), kernel=S.DeepGemmFp8BlockScaledMMKernel())
        linear.weight_scale_inv = packed((2, 1))
        experts = S.fp8_moe(S.pow2_scales(4), S.Fp8MoEMethod(
            fp8_backend=S.Fp8MoeBackend.DEEPGEMM))
        experts.w13_weight_scale_inv = packed((2, 256, 1))
        m = S.Model([("model.layers.0.self_attn.o_proj", linear),
                     ("model.layers.0.mlp.experts", experts)])
        self.assertEqual(el.vllm_kernel_layout(m), "deepgemm-sm100")
        # SM90's f32 UE8M0 scales beside SM100's packed ones: one layout only.
        sm90 = S.fp8_linear(S.pow2_scales(2), kernel=S.DeepGemmFp8BlockScaledMMKernel())
        self.refused(S.Model([("l.o_proj", sm90), ("l.qkv_proj", linear)]),
                     "int32-packed", "VLLM_USE_DEEP_GEMM=0")

    def test_marlin_aiter_trtllm_fnuz_xpu_refused_by_name(self):
        self.refused(S.Model([("model.layers.3.self_attn.o_proj", S.fp8_linear(
            S.float_scales(2), use_marlin=True))]),
            "model.layers.3.self_attn.o_proj", "Marlin", "VLLM_TEST_FORCE_FP8_MARLIN")
        self.refused(S.Model([("model.layers.3.self_attn.o_proj", S.fp8_linear(
            S.float_scales(2), kernel=S.MarlinFp8ScaledMMLinearKernel()))]), "Marlin")
        self.refused(S.Model([("model.layers.2.mlp.experts", S.fp8_moe(
            S.float_scales(4), S.Fp8MoEMethod(fp8_backend=S.Fp8MoeBackend.MARLIN)))]),
            "model.layers.2.mlp.experts", "Marlin")
        self.refused(S.Model([("l.experts", S.fp8_moe(S.float_scales(4), S.Fp8MoEMethod(
            rocm_aiter_moe_enabled=True)))]), "AITER", "VLLM_ROCM_USE_AITER_MOE=0")
        self.refused(S.Model([("l.experts", S.bf16_moe(S.UnquantizedFusedMoEMethod(
            S.UnquantizedMoeBackend.AITER)))]), "AITER")
        self.refused(S.Model([("l.o_proj", S.fp8_linear(
            S.float_scales(2), kernel=S.AiterFp8BlockScaledMMKernel()))]),
            "AITER", "VLLM_ROCM_USE_AITER=0")
        self.refused(S.Model([("l.experts", S.fp8_moe(S.float_scales(4), S.Fp8MoEMethod(
            fp8_backend=S.Fp8MoeBackend.FLASHINFER_TRTLLM)))]),
            "l.experts", "TRTLLM", "VLLM_FLASHINFER_MOE_BACKEND=throughput")
        self.refused(S.Model([("l.experts", S.fp8_moe(S.float_scales(4), S.Fp8MoEMethod(
            flashinfer_moe_backend=S.FlashinferMoeBackend.TENSORRT_LLM)))]), "TRTLLM")
        self.refused(S.Model([("l.experts", S.bf16_moe(S.UnquantizedFusedMoEMethod(
            S.UnquantizedMoeBackend.FLASHINFER_TRTLLM)))]), "TRTLLM")
        fnuz = S.fp8_linear(S.float_scales(2))
        fnuz.weight = T.Tensor.of([0.0] * 4, (2, 2), T.float8_e4m3fnuz)
        self.refused(S.Model([("l.qkv_proj", fnuz)]), "l.qkv_proj", "FNUZ")
        self.refused(S.Model([("l.experts", S.fp8_moe(S.float_scales(4), S.Fp8MoEMethod(
            fp8_backend=S.Fp8MoeBackend.XPU)))]), "l.experts", "XPU")

    def test_mxfp8_linear_checkpoint_layout_and_refusals(self):
        ok = S.Model([("model.layers.0.self_attn.qkv_proj",
                       S.mxfp8_linear(S.Mxfp8LinearBackend.EMULATION))])
        self.assertIsNone(el.vllm_kernel_layout(ok))
        fi = S.mxfp8_linear(S.Mxfp8LinearBackend.FLASHINFER_CUTLASS, swizzled=True)
        self.assertEqual(el.vllm_kernel_layout(S.Model([("l0.qkv_proj", fi)])), "flashinfer")
        self.refused(S.Model([("l0.qkv_proj", fi), ("l0.o_proj", S.mxfp8_linear(
            S.Mxfp8LinearBackend.EMULATION))]), "l0.qkv_proj", "swizzled MXFP8", "l0.o_proj")
        self.refused(S.Model([("l0.qkv_proj", S.mxfp8_linear(
            S.Mxfp8LinearBackend.FLASHINFER_CUTLASS))]),
            "l0.qkv_proj", "FLASHINFER_CUTLASS", "F8_128x4")
        self.refused(S.Model([("l0.o_proj", S.mxfp8_linear(S.Mxfp8LinearBackend.MARLIN))]),
                     "l0.o_proj", "MARLIN")
        moe = S.fp8_moe(S.float_scales(4), S.Mxfp8OnlineMoEMethod())
        self.refused(S.Model([("model.layers.0.mlp.experts", moe)]),
                     "model.layers.0.mlp.experts", "FlashInfer TRTLLM", "quant=fp8")

    def test_nvfp4_linear_and_moe_layouts_and_refusals(self):
        class ModelOptNvFp4LinearMethod:
            def __init__(self, kernel):
                self.kernel = kernel

        class ModelOptNvFp4FusedMoE:
            def __init__(self, backend):
                self.nvfp4_backend = backend  # an enum; its name is what counts

        class CutlassNvFp4LinearKernel:
            pass

        class EmulationNvFp4LinearKernel:
            pass

        class MarlinNvFp4LinearKernel:
            pass

        def lin(kernel):
            return S.Layer(quant_method=ModelOptNvFp4LinearMethod(kernel()))

        self.assertIsNone(el.vllm_kernel_layout(
            S.Model([("l0.qkv_proj", lin(EmulationNvFp4LinearKernel))])))
        self.assertEqual(el.vllm_kernel_layout(
            S.Model([("l0.qkv_proj", lin(CutlassNvFp4LinearKernel))])), "flashinfer")
        self.refused(S.Model([("l0.o_proj", lin(MarlinNvFp4LinearKernel))]),
                     "l0.o_proj", "Marlin")
        self.refused(S.Model([("l0.qkv_proj", lin(CutlassNvFp4LinearKernel)),
                              ("l1.qkv_proj", lin(EmulationNvFp4LinearKernel))]),
                     "l1.qkv_proj", "one layout")

        def moe(backend):
            return S.Layer(quant_method=ModelOptNvFp4FusedMoE(backend), w13_weight=object())

        B = S.Mxfp8LinearBackend  # EMULATION, FLASHINFER_CUTLASS, MARLIN by name
        self.assertIsNone(el.vllm_kernel_layout(S.Model([("l0.mlp.experts", moe(B.EMULATION))])))
        self.assertEqual(el.vllm_kernel_layout(
            S.Model([("l0.mlp.experts", moe(B.FLASHINFER_CUTLASS))])), "flashinfer")
        self.refused(S.Model([("l0.mlp.experts", moe(B.MARLIN))]), "l0.mlp.experts", "MARLIN")

    def test_per_tensor_fp8_refused_with_flashinfer_alpha_named(self):
        self.refused(S.Model([("l.qkv_proj", S.fp8_linear(
            S.float_scales(2), block_quant=False))]), "l.qkv_proj", "per-tensor", "max scale")
        self.refused(S.Model([("l.experts", S.fp8_moe(
            [], S.Fp8MoEMethod(block_quant=False,
                               fp8_backend=S.Fp8MoeBackend.FLASHINFER_CUTLASS),
            per_tensor=True))]), "l.experts", "per-tensor", "alpha")

    def test_mixed_layouts_refused(self):
        # DeepGEMM requantized one linear, another kept float scales.
        self.refused(S.Model([
            ("l0.o_proj", S.fp8_linear(S.pow2_scales(2),
                                       kernel=S.DeepGemmFp8BlockScaledMMKernel())),
            ("l1.o_proj", S.fp8_linear(S.float_scales(2))),
        ]), "l0.o_proj", "l1.o_proj", "VLLM_USE_DEEP_GEMM=0")
        # DeepGEMM linears with FlashInfer MoE: two layouts.
        self.refused(S.Model([
            ("l0.o_proj", S.fp8_linear(S.pow2_scales(2),
                                       kernel=S.DeepGemmFp8BlockScaledMMKernel())),
            ("l0.experts", S.fp8_moe(S.float_scales(4), S.Fp8MoEMethod(
                fp8_backend=S.Fp8MoeBackend.FLASHINFER_CUTLASS))),
        ]), "kernel=flashinfer", "kernel=deepgemm")
        # FlashInfer on some MoE layers only.
        self.refused(S.Model([
            ("l0.experts", S.bf16_moe(S.UnquantizedFusedMoEMethod(
                S.UnquantizedMoeBackend.FLASHINFER_CUTLASS))),
            ("l1.experts", S.bf16_moe(S.UnquantizedFusedMoEMethod(
                S.UnquantizedMoeBackend.TRITON))),
        ]), "l0.experts", "l1.experts")


class VllmQuantFormatTest(unittest.TestCase):
    """refit.engine_formats.vllm_quant_format: the quant= value of each
    quantization method, and the refusals by name."""

    def named(cls_name, **attrs):  # a quant method of that class name
        obj = type(cls_name, (), {})()
        obj.__dict__.update(attrs)
        return obj

    M = staticmethod(named)

    def fmt(self, *methods):
        return ef.vllm_quant_format(S.Model([(f"model.layers.{i}.self_attn.qkv_proj",
                                              S.Layer(quant_method=m))
                                             for i, m in enumerate(methods)]))

    def refused(self, *methods, says):
        with self.assertRaises(refit.RefitError) as cm:
            self.fmt(*methods)
        self.assertEqual(cm.exception.code_name, "INVALID_ARGUMENT")
        for s in says:
            self.assertIn(s, cm.exception.message)

    def test_each_method_gives_its_format(self):
        M = self.M
        self.assertIsNone(self.fmt(S.UnquantizedLinearMethod(), M("Fp8KVCacheMethod")))
        self.assertEqual(self.fmt(S.Fp8LinearMethod(), M("Fp8KVCacheMethod")), "fp8")
        self.assertEqual(self.fmt(M("Mxfp8OnlineLinearMethod"), M("Fp8KVCacheMethod"),
                                  S.UnquantizedLinearMethod()), "mxfp8")
        self.assertEqual(self.fmt(M("ModelOptNvFp4LinearMethod"), M("ModelOptKVCacheMethod"),
                                  M("ModelOptNvFp4FusedMoE")), "nvfp4")
        # A modular MoE kernel wraps the method vLLM chose.
        wrapped = M("FusedMoEModularMethod", old_quant_method=M("Mxfp8OnlineMoEMethod"))
        self.assertEqual(self.fmt(wrapped), "mxfp8")

    def test_methods_refit_does_not_write_are_refused_by_name(self):
        M = self.M
        self.refused(M("ModelOptNvFp4W4A16LinearMethod"),
                     says=("model.layers.0.self_attn.qkv_proj", "W4A16", "Marlin"))
        self.refused(M("ModelOptNvFp4LinearMethod"), M("ModelOptNvFp4LMHeadMethod"),
                     says=("model.layers.1.self_attn.qkv_proj", "lm_head", "exclude_modules"))
        self.refused(M("ModelOptFp8LinearMethod"), says=("ModelOptFp8LinearMethod", "quant=fp8"))
        self.refused(M("CompressedTensorsLinearMethod"), says=("CompressedTensorsLinearMethod",))
        self.refused(M("GPTQMarlinLinearMethod"), says=("GPTQMarlinLinearMethod",))
        self.refused(M("Nvfp4OnlineMoEMethod"),
                     says=("Nvfp4OnlineMoEMethod", "nvfp4_per_token", "ModelOpt NVFP4 checkpoint"))
        # As vLLM leaves it (online/nvfp4.py 0136201): the backend chosen for
        # per-token activations, named; behind a modular kernel too.
        trtllm = M("Nvfp4OnlineMoEMethod", nvfp4_backend=S.NvFp4MoeBackend.FLASHINFER_TRTLLM)
        for method in (trtllm, M("FusedMoEModularMethod", old_quant_method=trtllm)):
            self.refused(method, says=("model.layers.0.self_attn.qkv_proj",
                                       "FLASHINFER_TRTLLM here", "shuffled", "recipe=vllm",
                                       "model in BF16"))
        os.environ["FLASHINFER_NVFP4_4OVER6"] = "1"
        try:
            self.refused(M("Nvfp4OnlineMoEMethod"),
                         says=("4over6", "unset FLASHINFER_NVFP4_4OVER6"))
        finally:
            del os.environ["FLASHINFER_NVFP4_4OVER6"]
        self.refused(S.Fp8LinearMethod(), M("ModelOptNvFp4LinearMethod"),
                     says=("model.layers.0.self_attn.qkv_proj holds fp8",
                           "model.layers.1.self_attn.qkv_proj nvfp4", "one format"))

    def test_nvfp4_recipe_detected_and_a_mismatch_refused_by_name(self):
        M = self.M

        def recipe(*methods):
            return ef.vllm_nvfp4_recipe(S.Model([(f"model.layers.{i}.mlp.experts",
                                                  S.Layer(quant_method=m))
                                                 for i, m in enumerate(methods)]))

        self.assertEqual(recipe(M("ModelOptNvFp4LinearMethod"), M("ModelOptNvFp4FusedMoE")),
                         "modelopt")
        self.assertEqual(recipe(S.UnquantizedLinearMethod(), M("Nvfp4OnlineMoEMethod")), "vllm")
        self.assertIsNone(recipe(S.Fp8LinearMethod(), M("Mxfp8OnlineLinearMethod")))
        # The convention's recipe against the one the layers hold.
        self.assertEqual(ew.with_quant("vllm:tp=1", "nvfp4", "modelopt"),
                         "vllm:tp=1,quant=nvfp4")
        self.assertEqual(ew.with_quant("vllm:tp=1,recipe=modelopt", "nvfp4", "modelopt"),
                         "vllm:tp=1,recipe=modelopt,quant=nvfp4")
        self.assertEqual(ew.with_quant("vllm:tp=1", "nvfp4", "vllm"),
                         "vllm:tp=1,recipe=vllm,quant=nvfp4")
        for convention, held, says in (
                ("vllm:tp=1,quant=nvfp4,recipe=vllm", "modelopt",
                 ("recipe=vllm", "ModelOpt NVFP4 checkpoint", "use recipe=modelopt")),
                ("vllm:tp=1,quant=nvfp4,recipe=modelopt", "vllm",
                 ("recipe=modelopt", "quantized it itself", "use recipe=vllm"))):
            with self.assertRaises(refit.InvalidArgumentError) as cm:
                ew.with_quant(convention, "nvfp4", held)
            for s in says:
                self.assertIn(s, cm.exception.message)

    def test_mxfp8_emulation_experts_and_dequantized_weights(self):
        class EmulationMxfp8LinearKernel:
            pass

        class FlashInferMxfp8LinearKernel:
            pass

        class Mxfp8EmulationTritonExperts:
            pass

        def lin(kernel, dtype=T.float8_e4m3fn):
            qm = self.M("Mxfp8OnlineLinearMethod", kernel=kernel())
            return S.Layer(quant_method=qm,
                           weight=T.Tensor.of([0.0] * 64 * 64, (64, 64), dtype),
                           weight_scale=T.Tensor.of([127.0] * 64 * 2, (64, 2), T.uint8))
        self.assertIsNone(el.vllm_kernel_layout(S.Model([("l0.o_proj",
                                                          lin(EmulationMxfp8LinearKernel))])))
        for layer, says in ((lin(EmulationMxfp8LinearKernel, T.bfloat16),
                             "VLLM_MXFP8_EMULATION_DEQUANT_AT_LOAD=0"),
                            (lin(FlashInferMxfp8LinearKernel), "FlashInferMxfp8LinearKernel")):
            with self.assertRaises(refit.RefitError) as cm:
                el.vllm_kernel_layout(S.Model([("l0.o_proj", layer)]))
            self.assertIn("layer l0.o_proj", cm.exception.message)
            self.assertIn(says, cm.exception.message)
        experts = self.M("Mxfp8OnlineMoEMethod",
                         moe_kernel=self.M("FusedMoEKernel",
                                           fused_experts=Mxfp8EmulationTritonExperts()))
        moe = S.Layer(quant_method=experts,
                      w13_weight=T.Tensor.of([0.0] * 2 * 64 * 64, (2, 64, 64), T.float8_e4m3fn),
                      w13_weight_scale=T.Tensor.of([127.0] * 2 * 64 * 2, (2, 64, 2), T.uint8))
        self.assertIsNone(el.vllm_kernel_layout(S.Model([("l0.mlp.experts", moe)])))


class SglangKernelLayoutTest(unittest.TestCase):
    def refused(self, model, *says):
        with self.assertRaises(refit.RefitError) as cm:
            el.sglang_kernel_layout(model)
        self.assertEqual(cm.exception.code_name, "INVALID_ARGUMENT")
        for s in says:
            self.assertIn(s, cm.exception.message)

    def test_checkpoint_layouts_give_none(self):
        # Block FP8 with float scales (Triton, CUTLASS, DeepGEMM on SM90) and
        # BF16 experts for Triton; power-of-two float scales (a UE8M0
        # checkpoint, read as loaded on SM90) too.
        self.assertIsNone(el.sglang_kernel_layout(S.Model([
            ("model.layers.0.self_attn.o_proj", S.fp8_linear(S.float_scales(2))),
            ("model.layers.0.mlp.experts", S.fp8_moe(S.float_scales(4), S.Fp8MoEMethod())),
            ("model.layers.1.self_attn.o_proj", S.fp8_linear(S.pow2_scales(2))),
            ("model.layers.1.mlp.experts", S.bf16_moe(S.UnquantizedFusedMoEMethod(
                load_up_proj_weight_first=False))),
            ("model.layers.1.mlp.down_proj", S.Layer(quant_method=S.UnquantizedLinearMethod())),
        ])))

    def test_flashinfer_cutlass_bf16_experts_give_flashinfer(self):
        self.assertEqual(el.sglang_kernel_layout(S.Model([
            ("model.layers.0.self_attn.qkv_proj", S.Layer(quant_method=S.UnquantizedLinearMethod())),
            ("model.layers.0.mlp.experts", S.bf16_moe(S.UnquantizedFusedMoEMethod(
                use_flashinfer_cutlass=True, load_up_proj_weight_first=True))),
        ])), "flashinfer")

    def test_layouts_refit_does_not_write_refused_by_name(self):
        def moe(**flags):
            return S.Model([("model.layers.3.mlp.experts",
                             S.bf16_moe(S.UnquantizedFusedMoEMethod(**flags)))])
        self.refused(moe(use_flashinfer_trtllm_moe=True), "model.layers.3.mlp.experts",
                     "FlashInfer TRTLLM", "--moe-runner-backend triton")
        self.refused(moe(w13_swiglu_interleaved=True), "model.layers.3.mlp.experts",
                     "SGLANG_OPT_FUSE_SWIGLU_INTERLEAVED=0")
        self.refused(moe(use_triton_kernels=True), "triton_kernels", "--moe-runner-backend triton")
        # FP8 experts through FlashInfer CUTLASS: per-tensor (ModelOpt FP8)
        # or, were block scales loaded up-first, still not a layout refit writes.
        self.refused(S.Model([("model.layers.0.mlp.experts", S.fp8_moe(
            [], S.Fp8MoEMethod(load_up_proj_weight_first=True), per_tensor=True))]),
            "model.layers.0.mlp.experts", "per-tensor", "FlashInfer CUTLASS (ModelOpt FP8)")
        self.refused(S.Model([("model.layers.0.mlp.experts", S.fp8_moe(
            S.float_scales(4), S.Fp8MoEMethod(load_up_proj_weight_first=True)))]),
            "model.layers.0.mlp.experts", "per-tensor scales only", "--moe-runner-backend triton")
        # DeepGEMM's UE8M0 requantization on Blackwell: int32-packed scales.
        packed = S.fp8_linear(S.float_scales(2))
        packed.weight_scale_inv = T.Tensor.of([0] * 256, (256, 1), T.int32)
        self.refused(S.Model([("l.o_proj", packed)]), "l.o_proj", "UE8M0", "int32",
                     "SGLANG_ENABLE_JIT_DEEPGEMM=0")
        experts = S.fp8_moe(S.float_scales(4), S.Fp8MoEMethod())
        experts.w13_weight_scale_inv = T.Tensor.of([0] * 512, (2, 256, 1), T.int32)
        self.refused(S.Model([("l.experts", experts)]), "l.experts", "UE8M0",
                     "SGLANG_ENABLE_JIT_DEEPGEMM=0")
        self.refused(S.Model([("l.o_proj", S.fp8_linear(S.float_scales(2), use_marlin=True))]),
                     "l.o_proj", "Marlin")
        per_tensor = S.fp8_linear(S.float_scales(2))
        del per_tensor.weight_scale_inv
        self.refused(S.Model([("l.o_proj", per_tensor)]), "l.o_proj", "per-tensor")

    def test_mixed_moe_orders_refused(self):
        self.refused(S.Model([
            ("model.layers.0.mlp.experts", S.bf16_moe(S.UnquantizedFusedMoEMethod(
                load_up_proj_weight_first=True))),
            ("model.layers.1.mlp.experts", S.bf16_moe(S.UnquantizedFusedMoEMethod())),
        ]), "model.layers.0.mlp.experts", "model.layers.1.mlp.experts", "one layout")


# --- MLA derived tensors -------------------------------------------------------

HEADS, LORA, NOPE, V = 2, 5, 4, 3


def random_values(rng, n):
    return [rng.uniform(-2, 2) for _ in range(n)]


def kv_b_weight(rng, fp8):
    rows = HEADS * (NOPE + V)
    if not fp8:
        return S.Linear(T.Tensor.of(random_values(rng, rows * LORA), (rows, LORA), T.bfloat16))
    codes = [rng.choice(T.e4m3_values()) * rng.choice([-1, 1]) for _ in range(rows * LORA)]
    return S.Linear(T.Tensor.of(codes, (rows, LORA), T.float8_e4m3fn),
                    T.Tensor.of([rng.uniform(0.001, 0.01)], (1, 1), T.float32))


def write_new_bytes(proj, rng):
    """What a refit commit does: new bytes into the same kv_b_proj storage."""
    rows = HEADS * (NOPE + V)
    fresh = kv_b_weight(rng, proj.weight.dtype.name.startswith("float8"))
    proj.weight.copy_(fresh.weight)
    if hasattr(proj, "weight_scale_inv"):
        proj.weight_scale_inv.copy_(fresh.weight_scale_inv)
    assert proj.weight.shape == (rows, LORA)


def mla_attention(q_nope, latent, w_uk_t, w_uv):
    """Absorbed MLA for one query per head: q_nope [N][P], latent cache
    [T][L], W_UK_T [N][P][L], W_UV [N][L][V] -> [N][V] (vLLM's decode path:
    ql = q_nope @ W_UK_T, softmax(ql . c), o = a @ c, out = o @ W_UV)."""
    uk, uv = w_uk_t.tolist(), w_uv.tolist()
    out = []
    for n in range(HEADS):
        ql = [sum(q_nope[n][p] * uk[n][p][l] for p in range(NOPE)) for l in range(LORA)]
        scores = [sum(ql[l] * c[l] for l in range(LORA)) for c in latent]
        top = max(scores)
        e = [math.exp(s - top) for s in scores]
        a = [x / sum(e) for x in e]
        o = [sum(a[t] * latent[t][l] for t in range(len(latent))) for l in range(LORA)]
        out.append([sum(o[l] * uv[n][l][v] for l in range(LORA)) for v in range(V)])
    return out


class MlaDerivedTensorsTest(unittest.TestCase):
    def setUp(self):
        self.rng = random.Random(29)
        self.q = [random_values(self.rng, NOPE) for _ in range(HEADS)]
        self.latent = [random_values(self.rng, LORA) for _ in range(3)]

    def vllm_case(self, fp8, contiguous):
        proj = kv_b_weight(self.rng, fp8)
        impl = S.VllmMLAImpl(proj, HEADS, LORA, NOPE, V, contiguous)
        impl.process_weights_after_loading(T.bfloat16)
        model = S.Model([("model.layers.0.self_attn.mla_attn", S.VllmMLAAttention(impl))])
        uk_storage = impl.W_UK_T.untyped_storage()
        write_new_bytes(proj, self.rng)
        scratch = S.VllmMLAImpl(proj, HEADS, LORA, NOPE, V, contiguous)
        scratch.process_weights_after_loading(T.bfloat16)
        want = mla_attention(self.q, self.latent, scratch.W_UK_T, scratch.W_UV)
        return model, impl, uk_storage, want

    def test_vllm_stale_copies_are_recomputed_in_place(self):
        for fp8, contiguous in ((False, True), (True, False), (True, True)):
            with self.subTest(fp8=fp8, contiguous=contiguous):
                model, impl, storage, want = self.vllm_case(fp8, contiguous)
                stale = mla_attention(self.q, self.latent, impl.W_UK_T, impl.W_UV)
                self.assertNotEqual(stale, want)
                self.assertEqual(el.refresh_vllm_derived(model), 1)
                self.assertIs(impl.W_UK_T.untyped_storage(), storage)  # same storage
                self.assertEqual(mla_attention(self.q, self.latent, impl.W_UK_T, impl.W_UV),
                                 want)

    def test_vllm_views_of_kv_b_proj_need_nothing(self):
        model, impl, _, want = self.vllm_case(False, False)
        self.assertEqual(el.refresh_vllm_derived(model), 0)
        self.assertEqual(mla_attention(self.q, self.latent, impl.W_UK_T, impl.W_UV), want)

    def test_sglang_w_kc_w_vc_recomputed_in_place(self):
        for fp8 in (False, True):
            with self.subTest(fp8=fp8):
                proj = kv_b_weight(self.rng, fp8)
                attn = S.SglangMLA(proj, HEADS, LORA, NOPE, V)
                attn.post_load_weights()
                model = S.Model([("model.layers.0.self_attn", attn)])
                kc = attn.w_kc
                write_new_bytes(proj, self.rng)
                scratch = S.SglangMLA(proj, HEADS, LORA, NOPE, V)
                scratch.post_load_weights()
                # SGLang's w_kc is [N, P, L]: W_UK_T's shape.
                want = mla_attention(self.q, self.latent, scratch.w_kc, scratch.w_vc)
                self.assertNotEqual(mla_attention(self.q, self.latent, attn.w_kc, attn.w_vc),
                                    want)
                self.assertEqual(el.refresh_sglang_derived(model), 1)
                self.assertIs(attn.w_kc, kc)
                self.assertEqual(mla_attention(self.q, self.latent, attn.w_kc, attn.w_vc), want)

    def test_vllm_nvfp4_alphas_follow_the_global_scales(self):
        f32 = T.float32
        dense = S.Layer(alpha=T.Tensor.of([0.5], (), f32),
                        input_global_scale=T.Tensor.of([0.25], (), f32),
                        weight_global_scale=T.Tensor.of([3.0], (), f32))
        cfg = S.Layer(g1_alphas=T.Tensor.of([0.0, 0.0], (2,), f32),
                      g2_alphas=T.Tensor.of([0.0, 0.0], (2,), f32))
        moe = S.Layer(quant_method=S.Layer(moe_quant_config=cfg),
                      w13_input_scale=T.Tensor.of([2.0, 4.0], (2,), f32),
                      w13_weight_scale_2=T.Tensor.of([0.5, 0.125], (2,), f32),
                      w2_input_scale=T.Tensor.of([1.0, 3.0], (2,), f32),
                      w2_weight_scale_2=T.Tensor.of([0.25, 2.0], (2,), f32))
        g1 = cfg.g1_alphas
        model = S.Model([("model.layers.0.self_attn.qkv_proj", dense),
                         ("model.layers.0.mlp.experts", moe)])
        self.assertEqual(el.refresh_vllm_derived(model), 2)
        self.assertEqual(dense.alpha.item(), 0.75)
        self.assertIs(cfg.g1_alphas, g1)  # written in place
        self.assertEqual(cfg.g1_alphas.flat(), [1.0, 0.5])
        self.assertEqual(cfg.g2_alphas.flat(), [0.25, 6.0])
        cfg.g1_alphas = T.Tensor.of([0.0], (1,), f32)  # folded differently: refused
        with self.assertRaises(refit.RefitError) as cm:
            el.refresh_vllm_derived(model)
        self.assertIn("model.layers.0.mlp.experts", cm.exception.message)
        self.assertIn("g1_alphas", cm.exception.message)

    def test_derived_copies_refit_does_not_recompute_are_refused(self):
        impl = S.VllmMLAImpl(kv_b_weight(self.rng, True), HEADS, LORA, NOPE, V, False)
        impl.process_weights_after_loading(T.bfloat16)
        impl.W_K_scale = T.Tensor.of([1.0], (1,), T.float32)
        with self.assertRaises(refit.RefitError) as cm:
            el.refresh_vllm_derived(S.Model([("model.layers.4.self_attn.mla_attn",
                                              S.VllmMLAAttention(impl))]))
        self.assertIn("model.layers.4.self_attn.mla_attn", cm.exception.message)
        self.assertIn("VLLM_ROCM_USE_AITER_FP8BMM=0", cm.exception.message)
        moe = S.Layer(output1_scales_scalar=T.Tensor.of([1.0], (1,), T.float32))
        with self.assertRaises(refit.RefitError) as cm:
            el.refresh_vllm_derived(S.Model([("model.layers.1.mlp.experts", moe)]))
        self.assertIn("output1_scales_scalar", cm.exception.message)
        attn = S.SglangMLA(kv_b_weight(self.rng, False), HEADS, LORA, NOPE, V)
        attn.post_load_weights()
        attn.w_kc = attn.w_kc.to(T.float8_e4m3fn)
        with self.assertRaises(refit.RefitError) as cm:
            el.refresh_sglang_derived(S.Model([("model.layers.2.self_attn", attn)]))
        self.assertIn("model.layers.2.self_attn", cm.exception.message)
        self.assertEqual(cm.exception.code_name, "INVALID_ARGUMENT")


if __name__ == "__main__":
    unittest.main()
