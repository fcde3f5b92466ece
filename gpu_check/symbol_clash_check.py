"""refit's client library next to torch, on a GPU host, from the bundle.

Checks:
- exports: each client library (the bundle's librefit_client*.so and, when
  the bundle has a wheel in dist/, the wheel's refit/_native copies)
  exports refit_* symbols only: no protobuf, Abseil or gRPC symbol a
  process's other libraries could bind to (read from the ELF dynamic
  symbol table, defined global and weak symbols; `nm -D --defined-only`).
- next to torch: a fresh process imports torch, uses torch's C++ paths
  (TorchScript compile, save and load; the profiler; a gloo process group
  with an all_reduce; the TorchScript ONNX exporter, which serializes
  through protobuf, when this torch has it), then loads refit's library,
  runs one refit round between two members through refitd (host buffers,
  bytes compared), then uses the same torch paths again. Run once with
  the bundle's package and once with the wheel unpacked on its own on
  sys.path (no PYTHONPATH to the bundle, no REFIT_CLIENT_LIB).
- Also printed, not judged: how many protobuf / Abseil / gRPC symbols
  torch's own libraries export, and which of them refit's bundled
  libraries also define (candidates for one library binding to the
  other's copy).

Prints PASS/FAIL lines; exit code 0 only if all pass.

  python3 symbol_clash_check.py BUNDLE_DIR
"""
import glob
import json
import mmap
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

DEADLINE = 120.0
FAMILIES = re.compile(r"protobuf|absl|grpc|gpr_", re.IGNORECASE)
MODEL, TRAINER, ENGINE = "tiny-qwen3", "fsdp:dp=1", "vllm:tp=1"


# --------------------------------------------------------------- ELF
def exported_symbols(path):
    """Names of the defined global / weak / unique symbols with default or
    protected visibility in an ELF64 little-endian file's .dynsym (what
    `nm -D --defined-only` lists). Raises ValueError for another format."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"\x7fELF" or m[4] != 2 or m[5] != 1:
            raise ValueError(f"{path}: not an ELF64 little-endian file")
        shoff, = struct.unpack_from("<Q", m, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", m, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", m, shoff + i * shentsize)
                    for i in range(shnum)]
        names = []
        for sec in sections:
            if sec[1] != 11:  # SHT_DYNSYM
                continue
            off, size, link = sec[4], sec[5], sec[6]
            stroff = sections[link][4]
            for at in range(off, off + size, 24):
                st_name, st_info, st_other, st_shndx = struct.unpack_from("<IBBH", m, at)
                if st_shndx == 0 or (st_info >> 4) not in (1, 2, 10) or (st_other & 3) in (1, 2):
                    continue
                end = m.find(b"\0", stroff + st_name)
                names.append(m[stroff + st_name:end].decode("ascii", "replace"))
        return names


def check_exports(libs):
    """[(ok, line)] per client library: refit_* exports only."""
    out = []
    for lib in libs:
        syms = exported_symbols(lib)
        other = [s for s in syms if not s.startswith("refit_")]
        clash = [s for s in other if FAMILIES.search(s)]
        ok = bool(syms) and not other
        out.append((ok, f"{lib}: {len(syms)} exported symbols, "
                        f"{len(clash)} protobuf/Abseil/gRPC, {len(other)} not refit_*"
                        + (f": {other[:5]}" if other else "")))
    return out


def torch_overlap(bundle_lib_dir):
    """(counts of protobuf/Abseil/gRPC symbols torch's libraries export,
    those of them refit's bundled libraries also export)."""
    import torch
    tlibs = glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "*.so*"))
    theirs = set()
    for lib in tlibs:
        try:
            theirs.update(s for s in exported_symbols(lib) if FAMILIES.search(s))
        except (ValueError, OSError):
            continue
    ours = set()
    for lib in glob.glob(os.path.join(bundle_lib_dir, "*.so*")):
        try:
            ours.update(s for s in exported_symbols(lib) if FAMILIES.search(s))
        except (ValueError, OSError):
            continue
    return len(theirs), sorted(theirs & ours)


# ---------------------------------------------------- the child process
def torch_paths(tmp, tag):
    """Runs torch's C++ paths; returns {path: "ok" | "unavailable: ..."}."""
    import inspect
    import io
    import torch
    import torch.distributed as dist
    done = {}

    @torch.jit.script
    def f(x):
        return torch.relu(x) * 2 + 1

    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(torch.nn.Linear(4, 4)), buf)
    buf.seek(0)
    lin = torch.jit.load(buf)
    assert torch.equal(f(torch.ones(3)), torch.full((3,), 3.0))
    lin(torch.ones(2, 4))
    done["torchscript"] = "ok"
    with torch.profiler.profile() as prof:
        torch.ones(64, 64).matmul(torch.ones(64, 64))
    assert prof.key_averages()
    done["profiler"] = "ok"
    dist.init_process_group("gloo", init_method=f"file://{tmp}/gloo-{tag}", rank=0,
                            world_size=1, timeout=__import__("datetime").timedelta(seconds=60))
    t = torch.ones(8)
    dist.all_reduce(t)
    dist.destroy_process_group()
    assert torch.equal(t, torch.ones(8))
    done["gloo"] = "ok"
    try:
        out = io.BytesIO()
        # The TorchScript exporter (C++, protobuf); newer torch defaults to dynamo.
        kw = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
        torch.onnx.export(torch.nn.Linear(4, 4), (torch.ones(1, 4),), out, **kw)
        done["onnx (protobuf)"] = f"ok, {len(out.getvalue())} bytes"
    except Exception as e:  # this torch's exporter needs packages not installed
        done["onnx (protobuf)"] = f"unavailable: {type(e).__name__}: {str(e)[:80]}"
    return done


def one_round(refitd):
    """refitd, and a trainer and an engine member (threads, host tensors)
    of tiny-qwen3 moving one round; returns the bytes the engine received.
    Raises RuntimeError when a byte differs or a member fails."""
    import torch
    import refit
    d = subprocess.Popen([refitd, "--address=127.0.0.1:0"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        port = None
        t_end = time.monotonic() + 30
        lines = []
        threading.Thread(target=lambda: [lines.append(x) for x in d.stdout],
                         daemon=True).start()
        while port is None and time.monotonic() < t_end:
            for line in list(lines):
                if "listening on port " in line:
                    port = int(line.rsplit(" ", 1)[1])
            time.sleep(0.02)
        if port is None:
            raise RuntimeError("refitd did not report its port within 30 s")
        dtypes = {"bf16": torch.bfloat16, "f32": torch.float32}
        bufs = {}
        for side, conv in (("trainer", TRAINER), ("engine", ENGINE)):
            bufs[side] = {b.name: torch.zeros(b.shape, dtype=dtypes[b.dtype]) for b in
                          refit.expected_buffers(side=side, rank=0, model=MODEL,
                                                 convention=conv)}
        for t in bufs["trainer"].values():
            t.copy_(torch.randn(t.shape))
        stats, errors = {}, []

        def member(side, conv, eid):
            try:
                m = refit.Member(server=f"127.0.0.1:{port}", side=side, rank=0, model=MODEL,
                                 convention=conv, engine_id=eid, buffers=bufs[side],
                                 timeout=DEADLINE)
                m.prepare(timeout=DEADLINE)
                if side == "trainer":
                    m.start_round(1, timeout=DEADLINE)
                v = m.wait_for_round(timeout=DEADLINE)
                stats[side] = m.run_round(v, timeout=DEADLINE)
                m.close()
            except Exception as e:  # raised below
                errors.append(f"{side}: {type(e).__name__}: {e}")
        th = [threading.Thread(target=member, args=a) for a in
              (("trainer", TRAINER, None), ("engine", ENGINE, "e0"))]
        for t in th:
            t.start()
        for t in th:
            t.join(timeout=DEADLINE + 10)
        if errors or len(stats) != 2:
            raise RuntimeError("; ".join(errors) or "a member did not finish in time")
        name = "model.embed_tokens.weight"
        want = bufs["trainer"][name]  # the engine's has vLLM's vocabulary padding rows
        if not torch.equal(bufs["engine"][name][: want.shape[0]], want):
            raise RuntimeError(f"{name}: the engine's bytes differ from the trainer's")
        return stats["engine"]["bytes_received"]
    finally:
        d.kill()
        d.wait()


def child(refitd):
    """torch, then refit's library and a round, then torch again."""
    tmp = tempfile.mkdtemp(prefix="clash_")
    import torch
    result = {"torch": torch.__version__, "before": torch_paths(tmp, "a")}
    import refit
    lib = refit.load_library(gpu=torch.cuda.is_available())
    result["library"] = refit.loaded_library_path()
    result["build"] = lib.refit_build_info().decode()
    result["round_bytes"] = one_round(refitd)
    result["after"] = torch_paths(tmp, "b")
    result["round_bytes_again"] = one_round(refitd)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def run_child(refitd, pythonpath, label):
    """(ok, line) of a child run with ``pythonpath`` as its only
    PYTHONPATH and no REFIT_CLIENT_LIB."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "REFIT_CLIENT_LIB")}
    env["PYTHONPATH"] = pythonpath
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", refitd],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=4 * DEADLINE)
    except subprocess.TimeoutExpired:
        return False, f"{label}: the child did not finish within {4 * DEADLINE:g} s"
    res = [json.loads(l[7:]) for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if p.returncode != 0 or not res:
        tail = " | ".join(p.stdout.strip().splitlines()[-4:])
        return False, f"{label}: exit code {p.returncode} (a negative one is a signal): {tail}"
    r = res[0]
    return True, (f"{label}: torch {r['torch']} then {os.path.basename(r['library'])} "
                  f"({r['build']}): rounds of {r['round_bytes']} and "
                  f"{r['round_bytes_again']} bytes equal; torch before: {r['before']}; "
                  f"after: {r['after']}")


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    bundle = os.path.abspath(argv[0])
    refitd = os.path.join(bundle, "refitd")
    rows = []
    libs = sorted(glob.glob(os.path.join(bundle, "librefit_client*.so")))
    libs = [l for l in libs if "_testing" not in l]
    wheels = sorted(glob.glob(os.path.join(bundle, "dist", "refit_weights-*.whl")))
    unpacked = None
    if wheels:
        unpacked = tempfile.mkdtemp(prefix="refit_wheel_")
        with zipfile.ZipFile(wheels[-1]) as z:
            z.extractall(unpacked)
        for so in glob.glob(os.path.join(unpacked, "refit", "_native", "**", "*.so*"),
                            recursive=True):
            os.chmod(so, 0o755)
        libs += sorted(glob.glob(os.path.join(unpacked, "refit", "_native", "librefit_client*.so")))
    for ok, line in check_exports(libs):
        rows.append(("exports", ok, line))
    if not libs:
        rows.append(("exports", False, f"no client library in {bundle}"))
    rows.append(("next-to-torch",) + run_child(refitd, os.path.join(bundle, "python"),
                                                "bundle package"))
    if unpacked:
        rows.append(("next-to-torch",) + run_child(
            refitd, unpacked, f"wheel {os.path.basename(wheels[-1])} alone on sys.path"))
    else:
        rows.append(("next-to-torch", False, f"no wheel in {bundle}/dist (tools/bundle puts "
                                             f"one there)"))
    count, both = torch_overlap(os.path.join(bundle, "lib"))
    print(f"INFO torch's libraries export {count} protobuf/Abseil/gRPC symbols; refit's "
          f"bundled libraries define {len(both)} of them too"
          + (f", e.g. {both[:3]}" if both else ""))
    print("\n== refit's client library next to torch")
    for name, ok, line in rows:
        print(f"{'PASS' if ok else 'FAIL'}  {name:<13} {line}")
    return 0 if all(ok for _, ok, _ in rows) else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(child(sys.argv[2]))
    sys.exit(main(sys.argv[1:]))
