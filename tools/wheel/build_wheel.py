#!/usr/bin/env python3
"""Writes refit's Python wheel (PEP 427) from files already built.

  build_wheel.py [--cpu] OUT_DIR PACKAGE_DIR NATIVE_DIR

PACKAGE_DIR is client/python/refit (its modules but testing.py, which
needs the testing library, go in, and py.typed); NATIVE_DIR holds the
client libraries, the binaries refitd and refit and, in NATIVE_DIR/lib,
the shared libraries they load (as tools/bundle_copy.sh lays them out;
their rpath is $ORIGIN/lib). They become refit/_native, where
refit.load_library looks first and the commands find the binaries.

The distribution is "refit-weights" (the import name stays "refit"). The
platform tag is the one the files truly need: manylinux_2_N_x86_64 with N
the newest glibc symbol version any packaged ELF file needs (pip installs
it on hosts with glibc 2.N or later); libstdc++ comes from the host too
(GLIBCXX_3.4.M, named in the metadata), and the GPU library needs the CUDA
runtime and NCCL its ELF file names (libcudart.so.13, libnccl.so.2).
--cpu: a wheel of the host library only (no CUDA, no NCCL), its version
carrying the local label "+cpu". Entry points: the console scripts refitd and
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


def elf_needs(native_dir: str) -> dict:
    """What the packaged ELF files need from the host: the newest glibc and
    libstdc++ symbol versions ((major, minor) and the GLIBCXX_3.4 minor),
    and the CUDA and NCCL libraries named (sorted)."""
    glibc, glibcxx, libs = (2, 17), 0, set()
    for root, _, files in os.walk(native_dir):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            if not data.startswith(b"\x7fELF"):
                continue
            for m in re.finditer(rb"GLIBC_(\d+)\.(\d+)", data):
                glibc = max(glibc, (int(m.group(1)), int(m.group(2))))
            for m in re.finditer(rb"GLIBCXX_3\.4\.(\d+)", data):
                glibcxx = max(glibcxx, int(m.group(1)))
            if name.startswith("librefit_client"):
                libs.update(m.group(0).decode() for m in
                            re.finditer(rb"lib(?:cudart|nccl)\.so\.\d+", data))
    return {"glibc": glibc, "glibcxx": glibcxx, "libs": sorted(libs)}


def tag_of(needs: dict) -> str:
    """The wheel's tag: py3-none-manylinux_2_N_x86_64 for glibc 2.N."""
    return f"py3-none-manylinux_{needs['glibc'][0]}_{needs['glibc'][1]}_x86_64"


def requirements(needs: dict) -> str:
    """The host requirements in words, as the README states them."""
    words = (f"Linux x86-64 with glibc {needs['glibc'][0]}.{needs['glibc'][1]} or later "
             f"and libstdc++ with GLIBCXX_3.4.{needs['glibcxx']} (GCC "
             f"{GCC_OF_GLIBCXX.get(needs['glibcxx'], 'of that ABI')})")
    if needs["libs"]:
        words += "; for GPU buffers " + " and ".join(needs["libs"]) + " from the host"
    return words


# The GCC release that brought each GLIBCXX_3.4.N (libstdc++'s ABI page).
GCC_OF_GLIBCXX = {28: "9", 29: "11", 30: "12", 31: "13", 32: "14"}


def metadata(version: str, needs: dict) -> str:
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
        f"Requires: {requirements(needs)}.",
        "",
    ])


def wheel_file(tag: str) -> str:
    return "\n".join(["Wheel-Version: 1.0", "Generator: refit build_wheel.py",
                      "Root-Is-Purelib: false", f"Tag: {tag}", ""])


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


def build(out_dir: str, package_dir: str, native_dir: str, cpu: bool = False) -> str:
    """Writes the wheel into out_dir; returns its path. `cpu`: the host
    library only (refused when native_dir holds the GPU one)."""
    version = version_of(package_dir) + ("+cpu" if cpu else "")
    needs = elf_needs(native_dir)
    if cpu and needs["libs"]:
        sys.exit(f"build_wheel: --cpu, but {native_dir} needs {', '.join(needs['libs'])}")
    tag = tag_of(needs)
    dist_info = f"{DIST.replace('-', '_')}-{version}.dist-info"
    path = os.path.join(out_dir, f"{DIST.replace('-', '_')}-{version}-{tag}.whl")
    os.makedirs(out_dir, exist_ok=True)
    record: list = []
    with zipfile.ZipFile(path, "w") as z:
        for name, src in entries(package_dir, native_dir):
            with open(src, "rb") as f:
                add(z, name, f.read(), name.endswith(".so") or ".so." in name
                    or os.access(src, os.X_OK) and name.startswith("refit/_native/"),
                    record)
        for name, text in [("METADATA", metadata(version, needs)),
                           ("WHEEL", wheel_file(tag)),
                           ("entry_points.txt", ENTRY_POINTS),
                           ("top_level.txt", "refit\n")]:
            add(z, f"{dist_info}/{name}", text.encode(), False, record)
        record.append(f"{dist_info}/RECORD,,")
        info = zipfile.ZipInfo(f"{dist_info}/RECORD", EPOCH)
        info.external_attr = 0o644 << 16
        z.writestr(info, "\n".join(record) + "\n")
    return path


def main(argv) -> int:
    cpu = len(argv) > 1 and argv[1] == "--cpu"
    args = argv[2:] if cpu else argv[1:]
    if len(args) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    for d in args[1:]:
        if not os.path.isdir(d):
            sys.exit(f"build_wheel: {d}: no such folder")
    print(build(*args, cpu=cpu))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
