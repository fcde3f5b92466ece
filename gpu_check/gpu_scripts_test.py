"""What of the GPU-host Python checks runs here: each script parses;
rl_loop_gpu.py's command line (--backends, engines, modes) and which SGLang
rows must show a refusal; the
ELF reader of symbol_clash_check.py lists exactly what `nm -D
--defined-only` lists for the client libraries; and, where torch is
installed (not in CI), fused_qwen3.py's self-check (the fused-layout
forward against the unfused stand-in, the weight check, e4m3 decoding, the
w31 forward) and kernel_layouts_ref.py's (UE8M0 requantization, w31).

  gpu_scripts_test.py LIB.so... (the client libraries)
"""
import os
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ["rl_loop_gpu.py", "rl_loop_tables.py", "rl_loop_trainer.py", "rl_loop_sglang.py",
           "sglang_standin.py", "fused_qwen3.py", "kernel_layouts_ref.py", "lowp_dequant.py",
           "lowp_ref.py", "vllm_layers.py", "rl_loop_report.py", "symbol_clash_check.py",
           "nvfp4_vllm_check.py", "deepgemm_sm100_check.py"]
LIBS = [os.path.abspath(p) for p in sys.argv[1:]]
del sys.argv[1:]
sys.path.insert(0, HERE)

import symbol_clash_check  # noqa: E402  (stdlib only at import)


class GpuScriptsTest(unittest.TestCase):
    def test_scripts_parse(self):
        for name in SCRIPTS:
            path = os.path.join(HERE, name)
            with open(path) as f:
                compile(f.read(), path, "exec")

    def test_elf_reader_lists_what_nm_lists(self):
        self.assertTrue(LIBS)
        if not shutil.which("nm"):
            self.skipTest("no nm on this machine")
        for lib in LIBS:
            out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                                 stdout=subprocess.PIPE, text=True).stdout
            want = sorted(line.split()[-1] for line in out.splitlines() if line.strip())
            got = sorted(symbol_clash_check.exported_symbols(lib))
            self.assertEqual(got, want, lib)
            self.assertTrue(all(s.startswith("refit_") for s in got), lib)

    def test_export_check_flags_other_symbols(self):
        # libc exports far more than refit_*: the check must say so.
        libc = next((p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6")
                     if os.path.exists(p)), None)
        if libc is None:
            self.skipTest("no libc.so.6 at the usual paths")
        (ok, line), = symbol_clash_check.check_exports([libc])
        self.assertFalse(ok, line)

    def test_elf_reader_refuses_other_files(self):
        with self.assertRaises(ValueError):
            symbol_clash_check.exported_symbols(os.path.join(HERE, "rl_loop_gpu.py"))

    def test_rl_loop_backends_flag(self):
        import rl_loop_gpu as rl
        _, opts, rows = rl.plan_rows(["B", "--backends=vllm,sglang", "--models=qwen3",
                                      "--engines=bf16,deepgemm", "--modes=threads"])
        self.assertEqual(rows, [("vllm", "qwen3", "bf16", "threads"),
                                ("vllm", "qwen3", "deepgemm", "threads"),
                                ("sglang", "qwen3", "bf16", "threads"),
                                ("sglang", "qwen3", "deepgemm", "threads")])
        self.assertEqual(opts["backends"], "vllm,sglang")
        # Without the flag: the vLLM rows alone, as before it existed; vLLM's
        # online NVFP4 recipe for the MoE model alone.
        _, _, rows = rl.plan_rows(["B"])
        self.assertEqual({r[0] for r in rows}, {"vllm"})
        self.assertEqual(len(rows), 2 * 8 * 2 + 2)
        self.assertEqual([r for r in rows if r[2] == "nvfp4-vllm"],
                         [("vllm", "qwen3-moe", "nvfp4-vllm", m) for m in ("process", "threads")])
        # MXFP8 / NVFP4 engines are vLLM rows only.
        _, _, rows = rl.plan_rows(["B", "--backends=vllm,sglang", "--models=qwen3,qwen3-moe",
                                   "--engines=fp8,nvfp4,nvfp4-vllm", "--modes=threads"])
        self.assertEqual([r[:3] for r in rows], [("vllm", "qwen3", "fp8"),
                                                 ("vllm", "qwen3", "nvfp4"),
                                                 ("vllm", "qwen3-moe", "fp8"),
                                                 ("vllm", "qwen3-moe", "nvfp4"),
                                                 ("vllm", "qwen3-moe", "nvfp4-vllm"),
                                                 ("sglang", "qwen3", "fp8"),
                                                 ("sglang", "qwen3-moe", "fp8")])
        import rl_loop_tables as tables
        self.assertEqual(set(tables.TOL_VS_TRAINER), set(tables.ENGINE_CONVENTIONS))
        self.assertEqual(tables.kernel_of(tables.ENGINE_CONVENTIONS["nvfp4-vllm"], "recipe"),
                         "vllm")
        for argv, says in ((["B", "--backends=trtllm"], "unknown backend 'trtllm'"),
                           (["B", "--backends="], "unknown or empty option --backends="),
                           (["B", "--backends=sglang", "--engines=fp4"], "engine fp4"),
                           (["B", "--modes=remote"], "unknown mode remote"),
                           (["--backends=vllm"], "the bundle folder comes first")):
            with self.assertRaises(ValueError) as cm:
                rl.plan_rows(argv)
            self.assertIn(says, str(cm.exception), argv)

    def test_sglang_rows_cover_every_engine_and_say_which_must_be_refused(self):
        import rl_loop_gpu as rl
        import rl_loop_sglang as rls
        import rl_loop_tables as tables
        self.assertEqual(set(rls.CONVENTIONS),
                         set(tables.ENGINE_CONVENTIONS) - set(tables.VLLM_ONLY))
        self.assertTrue(all(c.startswith("sglang:tp=1") for c in rls.CONVENTIONS.values()))
        refused = {(e, m) for e in rls.CONVENTIONS for m in ("qwen3", "qwen3-moe")
                   if rls.expected_refusal(e, m)}
        self.assertEqual(refused, {("deepgemm", "qwen3"), ("deepgemm", "qwen3-moe"),
                                   ("flashinfer-fp8", "qwen3-moe")})

    def test_fused_forward_self_check(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("torch is not installed here")
        import fused_qwen3
        self.assertEqual(fused_qwen3.self_check(), 0)

    def test_kernel_layout_references_self_check(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("torch is not installed here")
        import kernel_layouts_ref
        self.assertEqual(kernel_layouts_ref.self_check(), 0)

    def test_low_precision_references_self_check(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("torch is not installed here")
        import lowp_ref
        self.assertEqual(lowp_ref.self_check(), 0)


if __name__ == "__main__":
    unittest.main()
