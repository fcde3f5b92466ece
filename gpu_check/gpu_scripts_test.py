"""What of the GPU-host Python checks runs here: each script parses; the
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
SCRIPTS = ["rl_loop_gpu.py", "fused_qwen3.py", "kernel_layouts_ref.py", "symbol_clash_check.py"]
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


if __name__ == "__main__":
    unittest.main()
