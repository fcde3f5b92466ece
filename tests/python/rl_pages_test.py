"""The runnable example of every RL framework page (docs/rl-*.md) runs as
written against a real refitd: its Python block, in a fresh interpreter
with this tree's refit module, moves two versions into its stand-in
rollout.

  rl_pages_test.py REFITD LIBREFIT_CLIENT_SO PAGE.md...
"""
import os
import re
import subprocess
import sys
import unittest

REFITD, LIB = (os.path.abspath(p) for p in sys.argv[1:3])
PAGES = [os.path.abspath(p) for p in sys.argv[3:]]
del sys.argv[1:]
os.environ["REFIT_CLIENT_LIB"] = LIB
import refit  # noqa: E402
import refitd_process  # noqa: E402

PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(refit.__file__)))


class RlPagesTest(unittest.TestCase):

    def test_every_page_has_a_runnable_example(self):
        self.assertEqual(len(PAGES), 4, PAGES)  # verl, NeMo-RL, OpenRLHF, slime
        for page in PAGES:
            with self.subTest(page=os.path.basename(page)):
                blocks = re.findall(r"```python\n(.*?)```", open(page).read(), re.S)
                self.assertEqual(len(blocks), 1, page)
                d = refitd_process.Refitd(REFITD)
                try:
                    out = subprocess.run([sys.executable, "-c", blocks[0]], capture_output=True,
                                         text=True, timeout=120,
                                         env=dict(os.environ, PYTHONPATH=PYTHONPATH,
                                                  REFITD=d.address))
                finally:
                    d.stop()
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertEqual(out.stdout.splitlines(),
                                 ["step 1 rollout holds version 1",
                                  "step 2 rollout holds version 2"], out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
