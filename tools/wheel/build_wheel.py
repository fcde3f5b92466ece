#!/usr/bin/env python3
"""Writes refit's Python wheel (PEP 427) from files already built.

  build_wheel.py OUT_DIR PACKAGE_DIR NATIVE_DIR

PACKAGE_DIR is client/python/refit (its modules but testing.py, which
needs the testing library, go in, and py.typed); NATIVE_DIR holds the
client libraries, the binaries refitd and refit and, in NATIVE_DIR/lib,
the shared libraries they load (as tools/bundle_copy.sh lays them out;
their rpath is $ORIGIN/lib). They become refit/_native, where
refit.load_library looks first and the commands find the binaries.

The distribution is "refit-weights" (the import name stays "refit"); the
tag is py3-none-linux_x86_64: the libraries need glibc >= 2.36 and
libstdc++ from the host. Entry points: the console scripts refitd and
refit (refit.commands: they execute the binaries in refit/_native), and
vLLM's general plugin that registers the "refit" weight-transfer backend.
The archive is
reproducible: sorted entries, fixed timestamps. Prints the wheel's path;
exits 1 naming a missing input.
"""
import base64
import hashlib
import os
import re
import stat
import sys
import zipfile

DIST = "refit-weights"
TAG = "py3-none-linux_x86_64"
LEFT_OUT = {"testing.py"}  # needs the testing library: tests only
COMMANDS = ("refitd", "refit")  # binaries in NATIVE_DIR, console scripts
EPOCH = (1980, 1, 1, 0, 0, 0)


def version_of(package_dir: str) -> str:
    """__version__ from the package's __init__.py."""
    with open(os.path.join(package_dir, "__init__.py")) as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        sys.exit(f"build_wheel: no __version__ in {package_dir}/__init__.py")
    return m.group(1)


def metadata(version: str) -> str:
    return "\n".join([
        "Metadata-Version: 2.1",
        f"Name: {DIST}",
        f"Version: {version}",
        "Summary: refit's client: moves model weights from an RL trainer into "
        "inference engines (vLLM backend, torch trainer helpers)",
        "License: Apache-2.0",
        "Requires-Python: >=3.8",
        "Provides-Extra: torch",
        "",
        "The import name is `refit`. The package carries the client library",
        "(librefit_client.so, and librefit_client_gpu.so for CUDA buffers), the",
        "commands `refitd` and `refit`, and the shared libraries they load;",
        "torch and vLLM are optional.",
        "",
    ])


def wheel_file() -> str:
    return "\n".join(["Wheel-Version: 1.0", "Generator: refit build_wheel.py",
                      "Root-Is-Purelib: false", f"Tag: {TAG}", ""])


ENTRY_POINTS = ("[console_scripts]\n"
                + "".join(f"{c} = refit.commands:{c}\n" for c in COMMANDS)
                + "\n[vllm.general_plugins]\nrefit = refit.vllm:register\n")


def entries(package_dir: str, native_dir: str):
    """(archive name, source path) of every packaged file, sorted."""
    out = []
    for name in sorted(os.listdir(package_dir)):
        if (name.endswith(".py") or name == "py.typed") and name not in LEFT_OUT:
            out.append((f"refit/{name}", os.path.join(package_dir, name)))
    for root, _, files in os.walk(native_dir):
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, native_dir).replace(os.sep, "/")
            out.append((f"refit/_native/{rel}", path))
    for need in ("librefit_client.so",) + COMMANDS:
        if not any(n == f"refit/_native/{need}" for n, _ in out):
            sys.exit(f"build_wheel: {native_dir} has no {need}")
    return sorted(out)


def digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(
        hashlib.sha256(data).digest()).rstrip(b"=").decode()


def add(z: zipfile.ZipFile, name: str, data: bytes, executable: bool,
        record: list) -> None:
    info = zipfile.ZipInfo(name, EPOCH)
    # A regular file's mode: pip keeps the executable bits only with it.
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data)
    record.append(f"{name},{digest(data)},{len(data)}")


def build(out_dir: str, package_dir: str, native_dir: str) -> str:
    """Writes the wheel into out_dir; returns its path."""
    version = version_of(package_dir)
    dist_info = f"{DIST.replace('-', '_')}-{version}.dist-info"
    path = os.path.join(out_dir, f"{DIST.replace('-', '_')}-{version}-{TAG}.whl")
    os.makedirs(out_dir, exist_ok=True)
    record: list = []
    with zipfile.ZipFile(path, "w") as z:
        for name, src in entries(package_dir, native_dir):
            with open(src, "rb") as f:
                add(z, name, f.read(), name.endswith(".so") or ".so." in name
                    or os.access(src, os.X_OK) and name.startswith("refit/_native/"),
                    record)
        for name, text in [("METADATA", metadata(version)), ("WHEEL", wheel_file()),
                           ("entry_points.txt", ENTRY_POINTS),
                           ("top_level.txt", "refit\n")]:
            add(z, f"{dist_info}/{name}", text.encode(), False, record)
        record.append(f"{dist_info}/RECORD,,")
        info = zipfile.ZipInfo(f"{dist_info}/RECORD", EPOCH)
        info.external_attr = 0o644 << 16
        z.writestr(info, "\n".join(record) + "\n")
    return path


def main(argv) -> int:
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    for d in argv[2:]:
        if not os.path.isdir(d):
            sys.exit(f"build_wheel: {d}: no such folder")
    print(build(*argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
