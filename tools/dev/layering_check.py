"""Checks refit's layering and file sizes over the source tree.

Layers, lowest first (docs/design.md): proto/common (0), layout (1),
mapping and plan (2, neither includes the other), exec and job (3, peers), client and
server (4), and at the top the programs (5, peers): cli (the `refit`
command), bench (benchmarks), gpu_check (GPU checks) and tools (the demo,
scripts, build macros, developer tools). A file includes only headers of its
own layer or lower ones. testing/ (test oracles and helpers) may include
anything below the programs, and only tests and programs include it. Tests (*_test.*, tests/) may
also include testing/ and peers of their layer (a server test talks to a
real client). Hand-written sources outside tests stay within MAX_LINES.
Within exec/, the package groups of exec/BUILD keep each folder (program/,
transport/, convert/, pull/, delta/, each with its cuda/) to the folders
below it: Bazel visibility fails an upward dependency at build time.

  python3 tools/dev/layering_check.py [REPO_ROOT]
Prints each violation and exits 1 if there is any.
"""
import os
import re
import sys

LEVEL = {"proto": 0, "common": 0, "layout": 1, "mapping": 2, "plan": 2,
         "exec": 3, "job": 3, "client": 4, "server": 4,
         "cli": 5, "bench": 5, "gpu_check": 5, "tools": 5}
PROGRAMS = ("cli", "bench", "gpu_check", "tools")
MAX_LINES = 720
SOURCES = (".h", ".cc", ".cu", ".py")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def top(path):
    return path.split("/", 1)[0]


def is_test(path):
    base = os.path.basename(path)
    return path.startswith("tests/") or re.search(r"_test\.(cc|py|sh)$", base) is not None


def violations(root):
    out = []
    for dirpath, dirnames, files in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "bazel-"))
                       and not (rel_dir == "." and d in ("third_party", "gpucarry"))]
        for f in files:
            if not f.endswith(SOURCES):
                continue
            path = os.path.normpath(os.path.join(rel_dir, f))
            with open(os.path.join(root, path), errors="replace") as fh:
                lines = fh.readlines()
            test = is_test(path)
            if not test and len(lines) > MAX_LINES:
                out.append(f"{path}: {len(lines)} lines (more than {MAX_LINES})")
            if not f.endswith((".h", ".cc", ".cu")):
                continue
            mine = top(path)
            for n, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                theirs = top(inc)
                if theirs not in LEVEL and theirs != "testing":
                    continue  # system or generated headers
                if theirs == "testing":
                    if not (test or mine == "testing" or mine in PROGRAMS):
                        out.append(f"{path}:{n}: includes {inc}: testing/ is for tests and programs")
                    continue
                if mine == "testing":
                    if LEVEL[theirs] > LEVEL["server"]:
                        out.append(f"{path}:{n}: includes {inc} from above testing/")
                    continue
                if mine not in LEVEL:
                    continue  # tests/ may include anything
                lo, hi = LEVEL[mine], LEVEL[theirs]
                peer = hi == lo and theirs != mine
                if hi > lo or (peer and not test):
                    out.append(f"{path}:{n}: {mine}/ (layer {lo}) includes {inc} "
                               f"({theirs}/, layer {hi})")
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    bad = violations(os.path.abspath(root))
    for b in bad:
        print(b)
    print(f"layering: {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
