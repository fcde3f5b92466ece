"""The layering check finds what it must, on a synthetic tree."""
import os
import tempfile
import unittest

import layering_check


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


class LayeringCheckTest(unittest.TestCase):
    def test_clean_tree_passes_and_each_violation_is_named(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "layout/box.h", '#include "common/status_macros.h"\n')
            write(root, "plan/planner.cc", '#include "layout/box.h"\n')
            write(root, "plan/planner_test.cc", '#include "testing/reference_copy.h"\n')
            write(root, "server/x_test.cc", '#include "client/refit_client.h"\n')
            self.assertEqual(layering_check.violations(root), [])
            write(root, "layout/bad.cc", '#include "exec/executor.h"\n')
            write(root, "plan/bad.cc", '#include "mapping/mapping.h"\n')
            write(root, "client/bad.cc", '#include "testing/reference_copy.h"\n')
            write(root, "exec/big.cc", "int x;\n" * 800)
            got = "\n".join(layering_check.violations(root))
            self.assertIn("layout/bad.cc:1: layout/ (layer 1) includes exec/executor.h", got)
            self.assertIn("plan/bad.cc:1: plan/ (layer 2) includes mapping/mapping.h", got)
            self.assertIn("client/bad.cc:1: includes testing/reference_copy.h", got)
            self.assertIn("exec/big.cc: 800 lines", got)


if __name__ == "__main__":
    unittest.main()
