"""The Python client on GPUs, from the bundle (no build on the GPU host):
refitd plus one Python process per member, each holding its weights as
torch tensors on its own GPU (dtype and shape as the convention says) and
moving them over NCCL through the refit module.

Checks, per scenario: every engine byte holds the round's version (the
reference pattern, via host copies), every engine tensor kept its
data_ptr, and a CUDA graph captured on the engine before the first round
reads the new weights when replayed after each round. The "killed"
scenario kills the trainer inside round 2, after its transport connected:
the engine must fail with refitd's ABORTED reason within seconds (its NCCL
wait is cancelled), not at its 60 s deadline. The "rejoin" scenario kills refitd after round 1 and starts it again on
its address: both members must rejoin and rounds 2 and 3 must move every
byte over new communicators. The "colocated" scenario
puts the trainer and the engine on one GPU (what NCCL refuses: "Duplicate
GPU detected"): both must get refitd's plan error naming the two members
and the GPU at prepare(), before any round. "ipc-1gpu" and "ipc-2gpu" move
Qwen3-0.6B (or --ipc_model) with the colocated pull path (transport "ipc")
instead, colocated on one GPU and across two, with the same checks as the
NCCL scenarios; "ipc-1gpu-expandable" does it with PyTorch's
expandable_segments allocator. "ipc-killed" is "killed" on the pull path,
trainer and engine on one GPU: the engine must fail within seconds with a
reason that names the trainer or its peer (refitd's ABORTED, or the pull
engine's UNAVAILABLE when the control channel sees the death first), exit
by itself (no signal: nothing read the dead trainer's memory), and its GPU
must still work after the failure. Prints a table last; exit
code 0 only if every check passed.

  python3 torch_gpu_check.py BUNDLE_DIR [--gpus=2] [--only=NAME,...]
                             [--ipc_model=MODEL]
"""
import json
import os
import subprocess
import sys
import threading
import time

DEADLINE = 120.0


def say(**kw):
    print(json.dumps(kw), flush=True)


# --------------------------------------------------------------- a member
def member(argv):
    import torch
    import refit
    import refit.testing
    refit.testing.load_library(gpu=True)  # the test patterns' library
    server, side, rank, model, convention, device, rounds, engine_id, die_in = argv
    rank, rounds, die_in = int(rank), int(rounds), int(die_in)
    torch.cuda.set_device(torch.device(device))
    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
              "f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2,
              "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8}
    want = refit.expected_buffers(side=side, rank=rank, model=model,
                                  convention=convention)
    tensors = {}
    for b in want:
        dt = dtypes.get(b.dtype, torch.uint8)
        t = torch.zeros(b.shape, dtype=dt, device=device)
        if t.numel() * t.element_size() != b.nbytes:  # a byte view then
            t = torch.zeros(b.nbytes, dtype=torch.uint8, device=device)
        tensors[b.name] = t
    m = refit.Member(server=server, side=side, rank=rank, model=model,
                     convention=convention, engine_id=engine_id or None,
                     device=device, buffers=tensors, heartbeat_ms=500,
                     timeout=DEADLINE,
                     transport=os.environ.get("GPU_CHECK_TRANSPORT") or None)
    info = m.prepare(timeout=DEADLINE)
    trainer = side == "trainer"
    ptrs = {n: t.data_ptr() for n, t in tensors.items()}
    graph = None
    if not trainer:
        # A CUDA graph over the largest engine tensor, captured before any
        # refit: it must read the new weights after each one.
        # (Its bytes summed as integers: pattern bytes may be NaNs.)
        name = max(tensors, key=lambda n: tensors[n].numel())
        src = tensors[name].view(-1).view(torch.uint8)[: 1 << 25]
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            out = src.sum(dtype=torch.int64)  # warm-up outside capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        # thread_local: another thread of this process (ipc-1process) may
        # work on the GPU meanwhile.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            out = src.sum(dtype=torch.int64)
    rejoin = os.environ.get("GPU_CHECK_REJOIN") == "1"
    v = 1
    while v <= rounds:
        try:
            got = one_round(m, v, info, trainer, die_in, tensors, ptrs, graph,
                            src if graph else None, out if graph else None, side)
        except refit.RefitError as e:
            if not rejoin or e.code_name not in ("UNAVAILABLE", "NOT_FOUND"):
                raise
            t0 = time.monotonic()
            m.rejoin(timeout=DEADLINE)
            info = m.prepare(timeout=DEADLINE)
            say(event="rejoined", version=v, after_s=time.monotonic() - t0,
                fingerprint=info["fingerprint"])
            continue
        if isinstance(got, int) and got < 0:
            return -got
        if rejoin and v == 1:
            time.sleep(3)  # the driver restarts refitd now
        v += 1
    m.close()
    say(event="ok")
    return 0


def one_round(m, v, info, trainer, die_in, tensors, ptrs, graph, src, out, side):
    """Round v; returns v, or minus an exit code."""
    import torch
    import refit
    import refit.testing
    if trainer:
        refit.testing.fill_pattern(m, v)
        torch.cuda.synchronize()
    key = f"gpu-check/{info['fingerprint']}/{v}"
    if info["global_rank"] != 0:
        m.kv_set(f"{key}/{info['global_rank']}", "1", timeout=DEADLINE)
    else:
        for r in range(1, info["global_world"]):
            m.kv_get(f"{key}/{r}", timeout=DEADLINE)
        m.start_round(v, timeout=DEADLINE)
    got = m.wait_for_round(timeout=DEADLINE)
    if got != v:
        raise RuntimeError(f"announced round {got}, expected {v}")
    if trainer and v == die_in:
        say(event="dying", version=v)
        os._exit(3)
    t0 = time.monotonic()
    try:
        stats = m.run_round(v, timeout=60.0)
    except refit.RefitError as e:
        after_s = time.monotonic() - t0
        # The device must still work: no sticky CUDA error from a copy out
        # of memory a dead peer owned.
        try:
            for t in tensors.values():
                t.view(-1)[:1].float().sum().item()
            torch.cuda.synchronize()
            cuda_ok = True
        except Exception:  # reported in the event
            cuda_ok = False
        say(event="round_failed", version=v, code=e.code_name,
            message=e.message, after_s=after_s, cuda_ok=cuda_ok)
        if e.code_name in ("UNAVAILABLE", "NOT_FOUND"):
            raise
        return -4
    ev = dict(event="round", side=side, version=v, **stats)
    if not trainer:
        refit.testing.check_pattern(m, v)
        graph.replay()
        torch.cuda.synchronize()
        fresh = src.sum(dtype=torch.int64)
        ev["graph_reads_new_weights"] = bool(torch.equal(out, fresh))
        ev["pointers_unchanged"] = all(t.data_ptr() == ptrs[n]
                                       for n, t in tensors.items())
        ev["checked"] = True
    say(**ev)
    return v


# ------------------------------------------------------------ the driver
def start_refitd(bundle, port=0):
    d = subprocess.Popen([os.path.join(bundle, "refitd"), f"--address=127.0.0.1:{port}",
                          "--staging_mib=512", "--heartbeat_timeout_ms=3000"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t_end = time.time() + 30
    while time.time() < t_end:
        line = d.stdout.readline()
        if not line:
            break
        if "listening on port " in line:
            return d, int(line.rsplit(" ", 1)[1])
    d.kill()
    raise RuntimeError("refitd did not report its port")


def run(bundle, model, trainer_conv, engine_conv, rounds, die_in, gpus,
        restart_refitd=False, transport=None):
    """One trainer on cuda:0 and one engine on cuda:{gpus-1}; returns
    [(returncode, events)] of both. restart_refitd: kill refitd once both
    members reported round 1 and start it again on the same address (the
    members rejoin)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(bundle, "python"))
    if restart_refitd:
        env["GPU_CHECK_REJOIN"] = "1"
    if transport:
        env["GPU_CHECK_TRANSPORT"] = transport
    d, port = start_refitd(bundle)
    server = f"127.0.0.1:{port}"
    specs = [("trainer", 0, trainer_conv, "cuda:0", "", die_in),
             ("engine", 0, engine_conv, f"cuda:{gpus - 1}", "e0", 0)]
    procs = [subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--member", server, side,
         str(rank), model, conv, dev, str(rounds), eid, str(die)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for side, rank, conv, dev, eid, die in specs]
    events = [[] for _ in procs]

    def read(i):
        for line in procs[i].stdout:
            try:
                events[i].append(json.loads(line))
            except ValueError:
                print("   ", line.rstrip())
    readers = [threading.Thread(target=read, args=(i,)) for i in range(len(procs))]
    for t in readers:
        t.start()
    until = time.time() + 500
    try:
        if restart_refitd:
            while time.time() < until and not all(
                    any(e.get("event") == "round" for e in ev) for ev in events):
                if any(p.poll() is not None for p in procs):
                    break
                time.sleep(0.05)
            d.kill()
            d.wait()
            time.sleep(0.5)
            d, _ = start_refitd(bundle, port)
        for p in procs:
            try:
                p.wait(timeout=max(1, until - time.time()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for t in readers:
            t.join(timeout=10)
        d.kill()
        d.wait()
    return [(p.returncode, ev) for p, ev in zip(procs, events)]


def rounds_verdict(res, rounds):
    """(good, detail) of a trainer/engine run that should commit `rounds`
    rounds with every engine check passing."""
    (t_rc, _), (e_rc, e_ev) = res
    er = [e for e in e_ev if e["event"] == "round"]
    good = (t_rc == 0 and e_rc == 0 and len(er) == rounds and
            all(e["checked"] and e["pointers_unchanged"] and
                e["graph_reads_new_weights"] for e in er))
    rates = [e["bytes_received"] / e["seconds"] / 1e9 for e in er if e["seconds"] > 0]
    if not (good and rates):
        return False, f"rc {t_rc}/{e_rc}"
    return True, (f"{len(er)} rounds of {er[-1]['bytes_received'] / 1e9:.2f} GB, "
                  f"best {max(rates):.0f} GB/s, bytes equal, pointers unchanged, "
                  f"graph reads new weights")


def same_process(bundle):
    """A trainer and an engine Member in ONE process on cuda:0 (one thread
    each), over the ipc transport: (trainer rc, engine rc) from member()."""
    d, port = start_refitd(bundle)
    os.environ["GPU_CHECK_TRANSPORT"] = "ipc"
    rcs = {}

    def side(name, conv, eid):
        try:
            rcs[name] = member([f"127.0.0.1:{port}", name, "0", "qwen3-0.6b", conv,
                                "cuda:0", "2", eid, "0"])
        except Exception as e:  # reported below
            say(event="error", side=name, message=f"{type(e).__name__}: {e}")
            rcs[name] = 1
    threads = [threading.Thread(target=side, args=("trainer", "megatron:tp=1", "")),
               threading.Thread(target=side, args=("engine", "vllm:tp=1", "e0"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    del os.environ["GPU_CHECK_TRANSPORT"]
    d.kill()
    d.wait()
    return rcs.get("trainer", -1), rcs.get("engine", -1)


# ------------------------------------- conversions against torch on the GPU
def torch_fp8_reference(w, block=128, ue8m0=False):
    """The reference blockwise quantizer in torch (float8_e4m3fn): tiles of
    block x block on the last two dims; scale = max(amax, 1e-4) / 448 and
    inv = 1 / scale as IEEE divisions by tensors (ue8m0: scale rounded up
    to a power of two first); values clamped to +-448."""
    import torch
    x = w.float()
    rows, cols = x.shape[-2], x.shape[-1]
    tr, tc = -(-rows // block), -(-cols // block)
    pad = torch.zeros(*x.shape[:-2], tr * block, tc * block, device=x.device)
    pad[..., :rows, :cols] = x.abs()
    amax = pad.reshape(*x.shape[:-2], tr, block, tc, block).amax(dim=(-3, -1))
    scale = amax.clamp(min=1e-4) / torch.full_like(amax, 448.0)
    if ue8m0:
        mant, expo = torch.frexp(scale)  # scale = mant * 2^expo, mant in [0.5, 1)
        scale = torch.where(mant == 0.5, scale, torch.ldexp(torch.ones_like(scale), expo))
    inv = torch.ones_like(scale) / scale
    inv_e = inv.repeat_interleave(block, -2).repeat_interleave(block, -1)[..., :rows, :cols]
    q = (x * inv_e).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q, scale


def vllm_parts(name):
    """HF tensor names fused into a vLLM TP1 buffer, in row order."""
    for fused, parts in (("qkv_proj", ("q_proj", "k_proj", "v_proj")),
                         ("gate_up_proj", ("gate_proj", "up_proj"))):
        if f".{fused}." in name:
            return [name.replace(fused, p) for p in parts]
    return [name]


def converted_same_process(bundle, model, trainer_conv, engine_conv, rounds=2,
                           trainer_dev="cuda:0", engine_dev="cuda:0"):
    ue8m0 = "fp8-ue8m0" in engine_conv
    """An FSDP trainer (HF names, whole tensors, random bf16 values) and a
    vLLM TP1 engine as two threads of this process on cuda:0 over the pull
    path; after each round every engine tensor is compared on the GPU with
    torch: FP8 weights and scales with torch_fp8_reference (bit for bit),
    Mamba's A with -exp(A_log.float()) (within 1 ulp), the rest byte for
    byte. Returns (ok, detail, seconds per round)."""
    import torch
    import refit
    d, port = start_refitd(bundle)
    server = f"127.0.0.1:{port}"
    devs = {"trainer": trainer_dev, "engine": engine_dev}
    dtypes = {"bf16": torch.bfloat16, "f32": torch.float32, "f8e4m3": torch.float8_e4m3fn}
    mk = {}
    for side, conv in (("trainer", trainer_conv), ("engine", engine_conv)):
        want = refit.expected_buffers(side=side, rank=0, model=model, convention=conv)
        mk[side] = {b.name: torch.zeros(b.shape, dtype=dtypes[b.dtype], device=devs[side])
                    for b in want}
    gen = torch.Generator(device=trainer_dev).manual_seed(5)
    res, secs = {}, []

    def side(name, conv, eid):
        dev = devs[name]
        torch.cuda.set_device(torch.device(dev))
        try:
            m = refit.Member(server=server, side=name, rank=0, model=model, convention=conv,
                             engine_id=eid or None, device=dev, buffers=mk[name],
                             heartbeat_ms=500, timeout=DEADLINE, transport="ipc")
            m.prepare(timeout=DEADLINE)
            for v in range(1, rounds + 1):
                if name == "trainer":
                    with torch.no_grad():
                        for t in mk["trainer"].values():
                            t.copy_(torch.randn(t.shape, generator=gen, device=dev) * 0.05)
                    torch.cuda.synchronize()
                    m.start_round(v, timeout=DEADLINE)
                m.wait_for_round(timeout=DEADLINE)
                st = m.run_round(v, timeout=60.0)
                if name == "trainer":
                    secs.append(st["seconds"])
                # Both threads pass the round before the next fill.
                barrier.wait(timeout=DEADLINE)
                if name == "engine":
                    res[v] = compare()
                barrier.wait(timeout=DEADLINE)
            m.close()
            res[name] = 0
        except Exception as e:  # reported below
            say(event="error", side=name, message=f"{type(e).__name__}: {e}")
            res[name] = 1
            barrier.abort()

    def trainer_name(n):
        for a, b in ((".attn.k_scale", ".k_scale"), (".attn.v_scale", ".v_scale"),
                     (".attn.q_scale", ".q_scale")):
            n = n.replace(a, b)  # vLLM's KV-cache scale names
        if n in mk["trainer"]:
            return n
        return n.replace("model.embed_tokens", "backbone.embeddings").replace(
            "model.", "backbone.", 1)  # NemotronH's HF names

    def reference(name, quant):
        """What the engine buffer `name` must hold, from the trainer's tensors."""
        src = mk["trainer"]
        scale = name.endswith("_scale_inv")
        weight = name[:-len("_scale_inv")] if scale else name

        def f(x):
            if not quant:
                return x
            q, sc = torch_fp8_reference(x.to(engine_dev), ue8m0=ue8m0)
            return sc if scale else q
        for fused, parts in (("w13_weight", ("gate_proj", "up_proj")),
                             ("w2_weight", ("down_proj",))):
            if weight.endswith(".experts." + fused):
                base = weight[:-len(fused)]
                if not any(k.startswith(base) for k in src):
                    base = trainer_name(base)  # NemotronH's HF prefix
                if f"{base}0.gate_proj.weight" not in src:
                    parts = tuple(p for p in parts if p != "gate_proj")  # non-gated MoE
                n = sum(1 for k in src if k.startswith(base) and k.endswith(parts[0] + ".weight"))
                return torch.stack([torch.cat([f(src[f"{base}{e}.{p}.weight"].to(engine_dev))
                                               for p in parts]) for e in range(n)])
        parts = [f(src[trainer_name(p)].to(engine_dev)) for p in vllm_parts(weight)]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def compare():
        torch.cuda.synchronize()
        bad, counts = [], {"fp8": 0, "scales": 0, "neg_exp": 0, "plain": 0}
        for name, t in mk["engine"].items():
            if name.endswith("mixer.A"):
                want = -torch.exp(mk["trainer"][trainer_name(name) + "_log"].to(engine_dev).float())
                if int((want.view(torch.int32) - t.view(torch.int32)).abs().max()) > 1:
                    bad.append(name)
                counts["neg_exp"] += 1
                continue
            quant = t.dtype == torch.float8_e4m3fn or name.endswith("_scale_inv")
            want = reference(name, quant)
            got = t[: want.shape[0]] if want.shape != t.shape else t  # vocab padding rows
            if want.dtype == torch.float8_e4m3fn:
                want, got = want.view(torch.uint8), got.view(torch.uint8)
            if want.shape != got.shape or not torch.equal(want, got):
                bad.append(name)
            key = "plain" if not quant else ("scales" if name.endswith("_scale_inv") else "fp8")
            counts[key] += 1
        return bad, counts

    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=side, args=("trainer", trainer_conv, "")),
               threading.Thread(target=side, args=("engine", engine_conv, "e0"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    d.kill()
    d.wait()
    checks = [res.get(v) for v in range(1, rounds + 1)]
    good = (res.get("trainer") == 0 and res.get("engine") == 0 and
            all(c is not None and not c[0] for c in checks))
    if not good:
        first = next((c[0][:5] for c in checks if c and c[0]), None)
        return False, f"rc {res.get('trainer')}/{res.get('engine')}, wrong: {first}", secs
    counts = checks[-1][1]
    return True, (f"{rounds} rounds; equal to torch on the GPU: {counts['fp8']} FP8 weights, "
                  f"{counts['scales']} scale tensors, {counts['neg_exp']} -exp, "
                  f"{counts['plain']} plain"), secs


def main():
    bundle = os.path.abspath(sys.argv[1])
    gpus = 2
    only = None
    for a in sys.argv[2:]:
        if a.startswith("--gpus="):
            gpus = int(a.split("=", 1)[1])
        if a.startswith("--only="):
            only = set(a.split("=", 1)[1].split(","))
    rows, ok = [], True
    # Typed tensors are checked against the convention before anything
    # moves: fp16 given for a bf16 weight (same bytes) is refused by name.
    sys.path.insert(0, os.path.join(bundle, "python"))
    import torch
    import refit
    import refit.testing
    # The testing variant: same_process() checks test patterns in this one.
    refit.testing.load_library(gpu=True)
    want = refit.expected_buffers(side="engine", rank=0, model="tiny-qwen3",
                                  convention="vllm:tp=1")
    bad = want[1].name
    tensors = {b.name: torch.zeros(b.shape, dtype=torch.float16 if b.name == bad
                                   else torch.bfloat16) for b in want}
    try:
        refit.Member(server="127.0.0.1:1", side="engine", engine_id="e0", rank=0,
                     model="tiny-qwen3", convention="vllm:tp=1", buffers=tensors)
        typed = (False, "a float16 tensor for a bf16 weight was accepted")
    except refit.RefitError as e:
        typed = (e.code_name == "INVALID_ARGUMENT" and f"{bad}: dtype f16, expected bf16"
                 in e.message, e.message)
    rows.append(("typed", "PASS" if typed[0] else "FAIL", typed[1]))
    ok &= typed[0]
    if only is None or "colocated" in only:
        t0 = time.monotonic()
        res = run(bundle, "qwen3-0.6b", "megatron:tp=1", "vllm:tp=1", 1, 0, 1)
        took = time.monotonic() - t0
        errors = [e for _, ev in res for e in ev if e["event"] == "error"]
        good = (all(rc == 1 for rc, _ in res) and len(errors) == 2 and
                all("are on the same GPU GPU-" in e["message"] for e in errors))
        for _, ev in res:
            for e in ev:
                print("colocated", json.dumps(e))
        detail = (f"both members refused at prepare() in {took:.1f} s: "
                  f"{errors[0]['message'][:150]}" if errors else "no error")
        rows.append(("colocated", "PASS" if good else "FAIL", detail))
        ok &= good
    # tiny-deepseek-v3-fp8: MLA, MoE, FP8 (e4m3 torch.float8_e4m3fn tensors)
    # with their 128x128 weight_scale_inv blocks, moved as bytes.
    for name, model, rounds, die_in in [("qwen3-0.6b", "qwen3-0.6b", 3, 0),
                                        ("qwen3-8b", "qwen3-8b", 2, 0),
                                        ("dsv3-fp8", "tiny-deepseek-v3-fp8", 2, 0),
                                        ("killed", "qwen3-0.6b", 2, 2)]:
        if only is not None and name not in only:
            continue
        if gpus < 2:  # NCCL between two GPUs; one GPU is the pull path's (refitd says so)
            rows.append((name, "SKIP", f"needs 2 GPUs, {gpus} given"))
            continue
        res = run(bundle, model, "megatron:tp=1", "vllm:tp=1", rounds, die_in, gpus)
        (t_rc, t_ev), (e_rc, e_ev) = res
        for ev in t_ev + e_ev:
            print(name, json.dumps(ev))
        if die_in:
            failed = [e for e in e_ev if e["event"] == "round_failed"]
            good = (t_rc == 3 and e_rc == 4 and len(failed) == 1 and
                    failed[0]["code"] == "ABORTED" and failed[0]["after_s"] < 15)
            detail = (f"engine failed {failed[0]['after_s']:.1f} s into round "
                      f"{failed[0]['version']}: {failed[0]['code']}") if failed else "no failure"
            rows.append((name, "PASS" if good else "FAIL", detail))
        else:
            good, detail = rounds_verdict(res, rounds)
            rows.append((name, "PASS" if good else "FAIL", detail))
        ok &= good
    # CUDA IPC: the trainer and the engine on ONE GPU (colocated), then on
    # two GPUs of the host. (--ipc_model=qwen3-8b for figures: its host-side
    # pattern checks take minutes.)
    ipc_model, ipc_rounds = "qwen3-0.6b", 3
    for a in sys.argv[2:]:
        if a.startswith("--ipc_model="):
            ipc_model, ipc_rounds = a.split("=", 1)[1], 2
    # "ipc-1gpu-expandable": both members' tensors from PyTorch's
    # expandable_segments allocator (cuMem memory, shared as file descriptors).
    for name, on in (("ipc-1gpu", 1), ("ipc-1gpu-expandable", 1), ("ipc-2gpu", gpus)):
        if only is not None and name not in only:
            continue
        if on < 2 and name == "ipc-2gpu":
            continue
        saved = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
        if name.endswith("expandable"):
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        res = run(bundle, ipc_model, "megatron:tp=1", "vllm:tp=1", ipc_rounds, 0, on,
                  transport="ipc")
        if saved is None:
            os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        else:
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = saved
        for ev in res[0][1] + res[1][1]:
            print(name, json.dumps(ev))
        good, detail = rounds_verdict(res, ipc_rounds)
        rows.append((name, "PASS" if good else "FAIL", detail))
        ok &= good
    if only is None or "ipc-killed" in only:
        # The trainer dies inside round 2 on the pull path (one GPU).
        res = run(bundle, "qwen3-0.6b", "megatron:tp=1", "vllm:tp=1", 2, 2, 1,
                  transport="ipc")
        (t_rc, t_ev), (e_rc, e_ev) = res
        for ev in t_ev + e_ev:
            print("ipc-killed", json.dumps(ev))
        failed = [e for e in e_ev if e["event"] == "round_failed"]
        f = failed[0] if failed else {}
        clear = any(w in f.get("message", "") for w in ("trainer", "peer"))
        good = (t_rc == 3 and e_rc in (1, 4) and len(failed) == 1 and
                f["code"] in ("ABORTED", "UNAVAILABLE") and f["after_s"] < 15 and
                clear and f.get("cuda_ok", False))
        detail = (f"engine failed {f['after_s']:.1f} s into round {f['version']}, "
                  f"exit {e_rc}, GPU usable after: {f.get('cuda_ok')}: {f['code']} "
                  f"{f['message'][:120]}") if failed else f"no failure (rc {t_rc}/{e_rc})"
        rows.append(("ipc-killed", "PASS" if good else "FAIL", detail))
        ok &= good
    if only is not None and "ipc-1process" in only:
        # Both members in this process: addresses, not IPC handles.
        t_rc, e_rc = same_process(bundle)
        good = t_rc == 0 and e_rc == 0
        rows.append(("ipc-1process", "PASS" if good else "FAIL",
                     "trainer and engine threads of one process on cuda:0: 2 rounds, "
                     "bytes checked" if good else f"rc {t_rc}/{e_rc}"))
        ok &= good
    # BF16 trainer into an FP8 engine, and NemotronH's f32 A, on one GPU
    # against torch (threads of this process over the pull path).
    conv_cases = [("fp8-qwen3-8b", "qwen3-8b", "vllm:tp=1,quant=fp8"),
                  ("bf16-qwen3-8b", "qwen3-8b", "vllm:tp=1"),
                  ("fp8-ue8m0-moe", "tiny-qwen3-moe-b128", "vllm:tp=1,quant=fp8-ue8m0"),
                  ("nemotron-a", "tiny-nemotron-h", "vllm:tp=1")]
    times = {}
    for name, model, engine_conv in conv_cases:
        if only is not None and name not in only:
            continue
        good, detail, secs = converted_same_process(bundle, model, "fsdp:dp=1", engine_conv)
        if secs:
            times[name] = min(secs)
            detail += f"; round {min(secs) * 1e3:.1f} ms"
        rows.append((name, "PASS" if good else "FAIL", detail))
        ok &= good
    if gpus >= 2:
        # The pull path between two GPUs of the host (peer access over
        # NVLink): a trainer on GPU 0, an engine on GPU 1, next to a peer
        # copy of the same bytes.
        for name, model, engine_conv in (("pull-2gpu-qwen3-8b", "qwen3-8b", "vllm:tp=1"),
                                          ("pull-2gpu-fp8-qwen3-8b", "qwen3-8b",
                                           "vllm:tp=1,quant=fp8")):
            if only is not None and name not in only:
                continue
            good, detail, secs = converted_same_process(
                bundle, model, "fsdp:dp=1", engine_conv, trainer_dev="cuda:0",
                engine_dev="cuda:1")
            if secs:
                times[name] = min(secs)
                detail += f"; round {min(secs) * 1e3:.1f} ms"
            rows.append((name, "PASS" if good else "FAIL", detail))
            ok &= good
        if only is None or "pull-2gpu-qwen3-8b" in only:
            a = torch.empty(16_381_000_000 // 2, dtype=torch.bfloat16, device="cuda:0")
            b = torch.empty_like(a, device="cuda:1")
            best = 1e9
            for _ in range(4):
                torch.cuda.synchronize(0)
                torch.cuda.synchronize(1)
                t0 = time.perf_counter()
                b.copy_(a)
                torch.cuda.synchronize(1)
                best = min(best, time.perf_counter() - t0)
            del a, b
            print(f"FIGURE peer copy GPU 0 -> GPU 1 of 16.38 GB (torch copy_, "
                  f"cudaMemcpyPeer): {best * 1e3:.1f} ms")
            if "pull-2gpu-qwen3-8b" in times:
                print(f"FIGURE pull path GPU 0 -> GPU 1, Qwen3-8B: "
                      f"{times['pull-2gpu-qwen3-8b'] * 1e3:.1f} ms "
                      f"({best / times['pull-2gpu-qwen3-8b']:.2f} of the peer copy's speed)")
    if "fp8-qwen3-8b" in times and "bf16-qwen3-8b" in times:
        print(f"FIGURE colocated Qwen3-8B refit on one GPU: BF16->FP8 "
              f"{times['fp8-qwen3-8b'] * 1e3:.1f} ms, BF16->BF16 "
              f"{times['bf16-qwen3-8b'] * 1e3:.1f} ms")
    if (only is None or "rejoin" in only) and gpus < 2:
        rows.append(("rejoin", "SKIP", f"needs 2 GPUs, {gpus} given"))
    elif only is None or "rejoin" in only:
        # refitd killed after round 1 and started again on its address: both
        # members rejoin, and rounds 2 and 3 move every byte over new NCCL
        # communicators.
        res = run(bundle, "qwen3-0.6b", "megatron:tp=1", "vllm:tp=1", 3, 0, gpus,
                  restart_refitd=True)
        (t_rc, t_ev), (e_rc, e_ev) = res
        for ev in t_ev + e_ev:
            print("rejoin", json.dumps(ev))
        er = [e for e in e_ev if e["event"] == "round"]
        rejoined = [e for ev in (t_ev, e_ev) for e in ev if e["event"] == "rejoined"]
        good = (t_rc == 0 and e_rc == 0 and [e["version"] for e in er] == [1, 2, 3] and
                all(e["checked"] and e["pointers_unchanged"] and
                    e["graph_reads_new_weights"] for e in er) and len(rejoined) == 2)
        detail = (f"refitd restarted after round 1; both rejoined in "
                  f"{max(e['after_s'] for e in rejoined):.2f} s; rounds 2-3 bytes equal, "
                  f"pointers unchanged" if good else f"rc {t_rc}/{e_rc}, {len(rejoined)} rejoined")
        rows.append(("rejoin", "PASS" if good else "FAIL", detail))
        ok &= good
    print("\n== Python client (torch tensors, NCCL) on GPUs")
    for r in rows:
        print(f"{r[1]}  {r[0]:<11} {r[2]}")
    print("(tiny-deepseek-v3-fp8: an MLA + MoE model in FP8 with its scales; "
          "its GB/s mean nothing at 2.6 MB)")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--member":
        try:
            sys.exit(member(sys.argv[2:]))
        except Exception as e:  # reported, then a failing exit code
            say(event="error", message=f"{type(e).__name__}: {e}")
            sys.exit(1)
    sys.exit(main())
