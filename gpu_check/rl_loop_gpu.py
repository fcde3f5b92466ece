"""An RL-style loop on a real model, from the bundle on a GPU host: a small
transformers model (Qwen3ForCausalLM, and Qwen3MoeForCausalLM) is the
trainer, in BF16 on the GPU, taking AdamW steps on random tokens; after
every step refit moves its weights (trainer convention fsdp:dp=1, the
module's own parameters through refit.torch, transformers' stacked experts
as per-expert views) into an engine that holds them in vLLM's fused layout
(the buffers refit.expected_buffers lists for vllm:tp=1, vllm:tp=1,quant=fp8,
and the kernel layouts kernel=flashinfer (BF16 and FP8: FlashInfer CUTLASS
MoE's w31 experts) and kernel=deepgemm (FP8 requantized to UE8M0 scales,
DeepGEMM on SM90)) and joins through refit's vLLM weight-transfer backend
(refit.vllm.RefitWeightTransferEngine: init, then start / update / finish
per step, shutdown). The engine computes logits with a forward written
against that layout the way vLLM's model code reads it (fused_qwen3.py).
MXFP8 and NVFP4 engines (vllm:tp=1,quant=mxfp8 / quant=nvfp4, and
kernel=flashinfer: swizzled NVFP4 scales, w31 experts) hold vLLM's layers
over their tensors (vllm_layers.py) and join with "vllm:tp=1" alone:
refit.vllm detects quant= and kernel= from the layers and recomputes the
NVFP4 alphas after each round (checked); the forward dequantizes them
(lowp_dequant.py) and every tensor is compared with lowp_ref.py.
"nvfp4-vllm" (vllm:tp=1,quant=nvfp4,recipe=vllm; MoE model only) is vLLM's
online NVFP4 (--quantization nvfp4_per_token: the routed experts quantized
by vLLM itself): refit.engine_formats must read recipe=vllm off a stand-in
of that layer and refuse the live layer by name (after loading its experts
sit in FlashInfer TRTLLM's shuffled layout, which refit does not write);
the engine then joins naming the convention, over the tensors vLLM's
method quantizes before that shuffle, compared with lowp_ref.py's use of
nvfp4_vllm_check.py's statement of the recipe.

Checks after every step (a row passes when all hold at every step):
- weights: every engine tensor holds the trainer's values: bit-equal, or for
  FP8 weights dequantized (e4m3 * weight_scale_inv per 128x128 block) within
  e4m3 rounding of them (two roundings under kernel=deepgemm); and under a
  kernel layout every engine tensor and scale is bit-equal to
  kernel_layouts_ref.py's statement of what vLLM holds after loading the
  same weights (w31 order; UE8M0 requantization);
- same weights: the engine's logits computed in float32 equal, within
  1e-3 of the logits' range, transformers' forward of a float32 copy of the
  model holding the engine's (dequantized) weights;
- vs trainer: the engine's logits computed in BF16, as vLLM does, equal
  transformers' own forward of the trainer's BF16 model on the same tokens
  within 3% of the logits' range (BF16), 25% (FP8, MXFP8), 50% (NVFP4): every
  token's for the dense model, 90% of them for the MoE one (a token whose
  router scores are a near-tie may go to another expert under BF16
  rounding in one of the two forwards);
- moved: the trainer's logits changed by more than 3% of their range since
  the previous step (the model trains; with the weight check, an engine
  holding a previous step's weights cannot pass).

Backends: "vllm" (the rows above); "sglang": the same checks with the
engine joining through refit.sglang instead (rl_loop_sglang.py: a stand-in
of SGLang's weight-update path with --custom-weight-loader
refit.sglang.load, over stand-in layers of the SGLang setup the engine name
stands for; the trainer calls refit.sglang.join_engine and sync_weights;
refit.sglang detects the kernel layout from the layers). Under sglang,
"flashinfer" is BF16 experts loaded [up; gate] for FlashInfer CUTLASS, and
the setups SGLang holds in a layout refit does not write ("flashinfer-fp8":
FP8 experts in FlashInfer CUTLASS, per-tensor; "deepgemm": DeepGEMM's
int32-packed UE8M0 scales, SM100) must be refused at registration naming
the layer: such a row reads REFUSED when refused as expected.

Modes: "process": the engine is a separate process on the same GPU, over
the colocated pull path (transport "ipc"); "threads": trainer and engine
are two threads (members) of one process. Prints a table last (backend,
model, engine, mode, steps, max |logit diff| vs trainer and its tolerance,
same-weights diff, PASS/FAIL/REFUSED, refit ms per step); exits non-zero
on any FAIL. Every wait is bounded.

  python3 rl_loop_gpu.py BUNDLE_DIR [--steps=3] [--models=qwen3,qwen3-moe]
      [--engines=bf16,fp8,flashinfer,...,nvfp4,nvfp4-flashinfer,nvfp4-vllm]
      [--backends=vllm,sglang] [--modes=process,threads] [--device=cuda:0]
      [--reference=transformers|stand-in] [--experts=IMPL] [--refitd=PATH]

--experts: transformers' experts implementation for the trainer
("eager", "grouped_mm", ...; default: transformers' own choice).
"--reference=stand-in --device=cpu" runs the same loop without
transformers or a GPU (fused_qwen3.StandInQwen3 as the trainer, host
buffers over TCP), for development.
"""
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import types

from rl_loop_tables import (ENGINE_CONVENTIONS, TOL_VS_TRAINER, TRAINER_CONVENTION,
                            kernel_of, runs)

DEADLINE = 120.0  # seconds, any one wait
PREPARE_TIMEOUT = 60.0  # the trainer's wait for the plan (the engine starting)
LR = 1e-3
TOL_SAME_WEIGHTS = 1e-3
MOE_TOKEN_SHARE = 0.9  # of the tokens within tolerance, MoE models
EVAL_SEED, EVAL_SHAPE = 1234, (2, 24)

HERE = os.path.dirname(os.path.abspath(__file__))


def say(**kw):
    print(json.dumps(kw), flush=True)


def use_bundle(bundle):
    """Makes the bundle's refit package and this folder importable."""
    for p in (os.path.join(bundle, "python"), HERE):
        if p not in sys.path:
            sys.path.insert(0, p)


def torch_setup():
    """torch with float32 matmuls in full precision (no TF32)."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def eval_tokens(vocab, device):
    """The tokens both sides compute logits of: fixed, from a seeded CPU
    generator, so the trainer's and the engine's process draw the same."""
    import torch
    g = torch.Generator().manual_seed(EVAL_SEED)
    return torch.randint(0, vocab, EVAL_SHAPE, generator=g).to(device)


# ------------------------------------------------------------- the engine
def engine_tensors(cfg_path, convention, device):
    """Zeroed tensors for every buffer refit expects of engine rank 0, with
    the convention's shapes and dtypes (FP8 as uint8 bytes where torch has
    no float8)."""
    import torch
    import refit
    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
              "u8": torch.uint8, "f8e4m3": getattr(torch, "float8_e4m3fn", torch.uint8)}
    out = {}
    for b in refit.expected_buffers(side="engine", rank=0, model=cfg_path,
                                    convention=convention):
        if b.dtype not in dtypes:
            raise RuntimeError(f"engine buffer {b.name}: dtype {b.dtype} not handled here")
        out[b.name] = torch.zeros(b.shape, dtype=dtypes[b.dtype], device=device)
    return out


def join_engine(server, cfg_path, convention, device, transport, tensors):
    """Joins engine rank 0 over ``tensors``: through refit's vLLM
    backend (init_transfer_engine; start_weight_update / update_weights /
    finish_weight_update; shutdown), or through refit.Member when the
    tensors are uint8 stand-ins for FP8 (torch without float8), which the
    backend's dtype check refuses, or when an installed vLLM's base class
    takes other constructor arguments. Returns (path, update, leave,
    stale): which of the two, update(v) running round v in place (its
    statistics), leave() (bounded), stale() the derived tensors not
    recomputed from the round's weights.

    MXFP8 and NVFP4 engines give the backend vLLM-shaped layers
    (vllm_layers.QuantizedTable) and the convention without quant= and
    kernel=: refit.vllm detects both from the layers, as in a vLLM worker,
    and must come to the row's convention; it refreshes their alphas.
    recipe=vllm: refit.vllm must refuse vLLM's online NVFP4 layer
    (vllm_layers.online_nvfp4_refusal); the engine joins naming the
    convention, over the tensors that layer quantizes before its shuffle."""
    import torch
    import refit
    import vllm_layers
    bytes_fp8 = not hasattr(torch, "float8_e4m3fn") and any(
        t.dtype == torch.uint8 for t in tensors.values())
    eng, path = None, "refit.Member (FP8 as bytes)"
    quant, kernel = kernel_of(convention, "quant"), kernel_of(convention)
    recipe = kernel_of(convention, "recipe")
    model, given, how = vllm_layers.TensorTable(tensors), convention, "vllm backend"
    if not bytes_fp8:
        import refit.engine_layouts
        import refit.vllm
        if quant in ("mxfp8", "nvfp4") and recipe != "vllm":
            refit.vllm.layout_hooks = None  # refit's own detectors and refresh
            model = vllm_layers.QuantizedTable(tensors, quant, kernel)
            given = ",".join(kv for kv in convention.split(",")
                             if not kv.startswith(("quant=", "kernel=")))
        else:
            if recipe == "vllm":
                vllm_layers.online_nvfp4_refusal(tensors)
                how += " (recipe=vllm named: vLLM's live nvfp4_per_token layer refused by name)"
            # A table of tensors read by fused_qwen3's forward, no vLLM
            # layers for the detector to inspect (engine_layouts_test covers
            # it on vLLM-shaped layers): it reports the layout this forward
            # reads; the refresh is refit's.
            refit.vllm.layout_hooks = (lambda _model, k=kernel: k,
                                       refit.engine_layouts.refresh_vllm_derived)
        try:
            eng = refit.vllm.RefitWeightTransferEngine(
                None, types.SimpleNamespace(parallel_config=types.SimpleNamespace(rank=0)),
                torch.device(device), model)
        except TypeError as e:  # an installed vLLM whose base class differs
            path = f"refit.Member (the vLLM backend: {e})"
    if eng is not None:
        eng.init_transfer_engine(dict(server=server, engine_id="e0", model=cfg_path,
                                      convention=given, rank=0, device=device,
                                      transport=transport, timeout=DEADLINE))
        got = eng.receiver.convention
        if given != convention and sorted(got.split(",")) != sorted(convention.split(",")):
            raise RuntimeError(f"refit.vllm registered {got} from {given}; the layers hold "
                               f"{convention}")

        def update(v):
            eng.start_weight_update()
            eng.update_weights({"version": v, "timeout": DEADLINE})
            eng.finish_weight_update()
            return eng.last_stats
        if given != convention:
            how += f" (detected {got[len(given) + 1:]})"
        return how, update, eng.shutdown, getattr(model, "stale_alphas", list)
    m = refit.Member(server=server, side="engine", rank=0, model=cfg_path,
                     convention=convention, engine_id="e0", device=device,
                     buffers=tensors, transport=transport, timeout=DEADLINE,
                     heartbeat_ms=500)
    m.prepare(timeout=DEADLINE)

    def update(v):
        got = m.wait_for_round(timeout=DEADLINE)
        if got != v:
            raise RuntimeError(f"engine: refitd announced round {got}, expected {v}")
        return m.run_round(v, timeout=DEADLINE)
    return path, update, m.close, list


def step_result(cfg, tokens, tensors, kernel, path, seconds):
    """What the engine delivers for a step: its logits computed in bf16 and
    float32 from its fused tensors (read in the ``kernel`` layout), host
    copies of those tensors, how it joined and the round's seconds."""
    import torch
    import fused_qwen3 as fq
    w = fq.EngineWeights(tensors, kernel)
    with torch.no_grad():
        return {"bf16": fq.fused_logits(cfg, w, tokens, torch.bfloat16, kernel).cpu(),
                "fp32": fq.fused_logits(cfg, w, tokens, torch.float32, kernel).cpu(),
                "tensors": {n: t.detach().cpu().clone() for n, t in tensors.items()},
                "path": path, "seconds": seconds}


def engine_setup(cfg_path, convention, device):
    """(config dict, zeroed engine tensors, eval tokens) on ``device``."""
    torch = torch_setup()
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    with open(cfg_path) as f:
        cfg = json.load(f)
    return cfg, engine_tensors(cfg_path, convention, device), eval_tokens(cfg["vocab_size"],
                                                                          device)


def engine_loop(server, cfg_path, convention, device, steps, transport, deliver):
    """The engine (vLLM backend): joins, then per step takes refit's round
    in place and delivers (step, step_result)."""
    cfg, tensors, tokens = engine_setup(cfg_path, convention, device)
    path, update, leave, stale = join_engine(server, cfg_path, convention, device, transport,
                                             tensors)
    try:
        for v in range(1, steps + 1):
            stats = update(v)
            result = step_result(cfg, tokens, tensors, kernel_of(convention), path,
                                 stats.get("seconds", 0.0))
            result["stale"] = [f"{p}: alpha is not input_global_scale * weight_global_scale "
                               f"after round {v}" for p in stale()]
            deliver(v, result)
    finally:
        leave()


def sglang_engine(cfg_path, convention, setup, device, deliver):
    """The engine (SGLang backend): rl_loop_sglang.ServedEngine over the
    setup's stand-in layers; the trainer drives it."""
    import rl_loop_sglang as rls
    cfg, tensors, tokens = engine_setup(cfg_path, convention, device)
    return rls.ServedEngine(
        tensors, setup, lambda t, k, path, s: step_result(cfg, tokens, t, k, path, s), deliver)


def engine_main(argv):
    """Entry of the engine process: rl_loop_gpu.py --engine BUNDLE SERVER
    CONFIG CONVENTION DEVICE STEPS OUTDIR TRANSPORT BACKEND SETUP; results as
    OUTDIR/step{v}.pt, an engine-side refit error as OUTDIR/error.json."""
    bundle, server, cfg_path, convention, device, steps, outdir, transport, backend, setup = argv
    use_bundle(bundle)
    torch = torch_setup()

    def deliver(v, result):
        if v is None:
            with open(os.path.join(outdir, ".error.json"), "w") as f:
                json.dump(result, f)
            os.replace(os.path.join(outdir, ".error.json"), os.path.join(outdir, "error.json"))
            return
        tmp = os.path.join(outdir, f".step{v}.pt")
        torch.save(result, tmp)
        os.replace(tmp, os.path.join(outdir, f"step{v}.pt"))
    if backend == "sglang":
        import rl_loop_sglang as rls
        rls.serve_files(outdir, sglang_engine(cfg_path, convention, setup, device, deliver),
                        DEADLINE)
    else:
        engine_loop(server, cfg_path, convention, device, int(steps),
                    None if transport == "-" else transport, deliver)
    say(event="engine_done")
    return 0


# -------------------------------------------------------------- the driver
from rl_loop_trainer import (build_trainer, float32_copy, load_engine_weights,  # noqa: E402
                             logits, train_step)


def start_refitd(refitd):
    """refitd on 127.0.0.1 (a free port): (process, port). Raises
    RuntimeError when it does not report its port within 30 s."""
    d = subprocess.Popen([refitd, "--address=127.0.0.1:0", "--staging_mib=512",
                          "--heartbeat_timeout_ms=3000"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in d.stdout] + [lines.put(None)],
                     daemon=True).start()
    t_end = time.monotonic() + 30
    while time.monotonic() < t_end:
        try:
            line = lines.get(timeout=max(0.01, t_end - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        if "listening on port " in line:
            return d, int(line.rsplit(" ", 1)[1])
    d.kill()
    d.wait()
    raise RuntimeError("refitd did not report its port within 30 s")


class EngineError(RuntimeError):
    """A refit error the engine side reported (``info``: what it delivered)."""

    def __init__(self, info):
        super().__init__(info["error"])
        self.info = info


class EngineProcess:
    """The engine as a child process; ``result(v)`` waits (bounded) for its
    step-v file, failing at once when the child died or reported an error.
    ``client``: the SGLang engine's handle for the trainer (sglang backend)."""

    def __init__(self, bundle, server, cfg_path, convention, device, steps, workdir, transport,
                 backend="vllm", setup="-"):
        self.dir = workdir
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.join(bundle, "python"), HERE, os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--engine", bundle, server, cfg_path,
             convention, device, str(steps), workdir, transport or "-", backend, setup],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if backend == "sglang":
            import rl_loop_sglang as rls
            self.client = rls.FileClient(workdir, lambda: self.proc.poll() is None, DEADLINE)

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    def result(self, v, timeout=DEADLINE):
        import torch
        path = os.path.join(self.dir, f"step{v}.pt")
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            if os.path.exists(path):
                return torch.load(path, weights_only=False)  # this test's own file
            if os.path.exists(os.path.join(self.dir, "error.json")):
                with open(os.path.join(self.dir, "error.json")) as f:
                    raise EngineError(json.load(f))
            if self.proc.poll() is not None:
                raise RuntimeError(f"the engine process exited ({self.proc.returncode}): "
                                   + " | ".join(self.lines[-5:]))
            time.sleep(0.02)
        raise RuntimeError(f"no engine result for step {v} within {timeout:g} s")

    def finish(self, timeout=60):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)
        return self.proc.returncode


class EngineThread:
    """The engine as a thread of this process (its own refit member); under
    the sglang backend, the stand-in SGLang engine in this process, whose
    TP worker runs on its own thread (``client``: the trainer's handle)."""

    def __init__(self, server, cfg_path, convention, device, steps, transport,
                 backend="vllm", setup="-"):
        self.results = queue.Queue()
        self.error = None
        self.thread = None
        if backend == "sglang":
            self.client = sglang_engine(cfg_path, convention, setup, device,
                                        lambda v, r: self.results.put((v, r)))
            return

        def body():
            try:
                engine_loop(server, cfg_path, convention, device, steps, transport,
                            lambda v, r: self.results.put((v, r)))
            except Exception as e:  # reported through result()
                self.error = f"{type(e).__name__}: {e}"
                self.results.put((None, None))
        self.thread = threading.Thread(target=body, daemon=True)
        self.thread.start()

    def result(self, v, timeout=DEADLINE):
        try:
            got, r = self.results.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"no engine result for step {v} within {timeout:g} s") from None
        if got is None and r is not None:
            raise EngineError(r)
        if got != v:
            raise RuntimeError(f"the engine thread failed: {self.error}")
        return r

    def finish(self, timeout=60):
        if self.thread is None:
            return 0
        self.thread.join(timeout=timeout)
        return 1 if self.error or self.thread.is_alive() else 0


def judge(dtype, moe, eng16, eng32, mine, prev, same_ref, problems):
    """(figures, why it fails or None) of one step: the engine's BF16 logits
    against the trainer's (per token, relative to the trainer logits'
    range; MoE: MOE_TOKEN_SHARE of the tokens, the others may sit on
    routing near-ties that BF16 rounding tips to another expert), the
    engine's float32 logits against the same-weights reference, how far
    the trainer's logits moved since the previous step, and the weight
    check's problems."""
    scale = float(mine.abs().max())
    tol = TOL_VS_TRAINER[dtype] * scale
    per_token = (eng16 - mine).abs().amax(-1).flatten()
    within = float((per_token <= tol).float().mean())
    need = MOE_TOKEN_SHARE if moe else 1.0
    same = float((eng32 - same_ref).abs().max())
    same_tol = TOL_SAME_WEIGHTS * float(same_ref.abs().max())
    moved = float((mine - prev).abs().max())
    moved_min = TOL_VS_TRAINER["bf16"] * scale
    fig = dict(diff=float(per_token.max()), tol=tol, within=within, same=same,
               same_tol=same_tol, moved=moved)
    if problems:
        return fig, problems[0]
    if within < need:
        return fig, (f"{within:.0%} of the tokens within |logit diff| {tol:.3g} of the "
                     f"trainer's (needs {need:.0%}; max {fig['diff']:.3g})")
    if same > same_tol:
        return fig, f"same-weights |logit diff| {same:.3g} > {same_tol:.3g}"
    if moved <= moved_min:
        return fig, f"the trainer's logits moved only {moved:.3g} (<= {moved_min:.3g})"
    return fig, None


def run_row(bundle, refitd, kind, dtype, mode, steps, device, reference, experts,
            backend="vllm"):
    """One (backend, model, engine dtype, mode): returns the row's record."""
    torch = torch_setup()
    import refit
    import refit.torch
    import fused_qwen3 as fq
    import rl_loop_sglang as rls
    row = dict(backend=backend, model=kind, engine=dtype, mode=mode, steps=0, ok=False,
               refused=False, detail="", diff=0.0, tol=0.0, within=0.0, same=0.0,
               same_tol=0.0, ms=[], round_ms=[], path="")
    transport = "ipc" if device.startswith("cuda") else None
    sglang = backend == "sglang"
    convention = (rls.CONVENTIONS if sglang else ENGINE_CONVENTIONS)[dtype]
    kernel = rls.KERNEL_READ.get(dtype) if sglang else kernel_of(convention)
    refusal = sglang and rls.expected_refusal(dtype, kind)
    d, port = start_refitd(refitd)
    server = f"127.0.0.1:{port}"
    engine = member = None
    work = tempfile.mkdtemp(prefix="rl_loop_")
    try:
        model, cfg = build_trainer(kind, device, reference, experts)
        cfg_path = os.path.join(work, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        ref32 = float32_copy(model)
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
        if mode == "process":
            engine = EngineProcess(bundle, server, cfg_path, convention, device, steps,
                                   work, transport, backend, dtype)
        else:
            engine = EngineThread(server, cfg_path, convention, device, steps, transport,
                                  backend, dtype)
        member = refit.torch.trainer_member(
            fq.ExpertViews(model), server=server, rank=0, model=cfg_path,
            convention=TRAINER_CONVENTION, device=device, transport=transport,
            timeout=DEADLINE, heartbeat_ms=500)
        if not sglang:
            member.prepare(timeout=PREPARE_TIMEOUT)
        else:
            why = rls.join(engine.client, member, server, cfg_path, convention, transport,
                           refusal, PREPARE_TIMEOUT)
            if why or refusal:
                row["path"] = "refit.sglang"
                row["detail"] = why or refused_as_expected(engine, row)
                rls.leave(engine.client)
                return row
        trainer = member.buffers  # fsdp names, tied aliases dropped
        shapes = {n: t.shape for n, t in trainer.items()}
        tied = bool(cfg.get("tie_word_embeddings"))
        tokens = eval_tokens(cfg["vocab_size"], device)
        gen = torch.Generator().manual_seed(7)
        prev = logits(model, tokens)
        moe = "num_experts" in cfg
        for v in range(1, steps + 1):
            loss = train_step(model, opt, gen, cfg["vocab_size"], device)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            if sglang:
                rls.sync(engine.client, member, v, DEADLINE)
                stats = None
            else:
                stats = refit.torch.publish(member, version=v, rank=0, world=1,
                                            timeout=DEADLINE)
            row["ms"].append((time.perf_counter() - t0) * 1e3)
            mine = logits(model, tokens)
            res = engine.result(v)
            row["round_ms"].append((stats or res).get("seconds", 0.0) * 1e3)
            row["path"] = res["path"]
            got = {n: t.to(device) for n, t in res["tensors"].items()}
            problems, counts = fq.check_engine_weights(got, trainer, kernel)
            problems += res.get("stale", [])
            quant, recipe = kernel_of(convention, "quant"), kernel_of(convention, "recipe")
            if kernel is not None or sglang or quant in ("mxfp8", "nvfp4"):
                import kernel_layouts_ref as kl
                exact, checked = kl.check_exact(got, trainer, quant, kernel, recipe)
                problems += exact
                counts["vllm_exact"] = checked
            load_engine_weights(ref32, got, shapes, tied, kernel)
            same_ref = logits(ref32, tokens)
            fig, why = judge(dtype, moe, res["bf16"].to(device), res["fp32"].to(device),
                             mine, prev, same_ref, problems)
            prev = mine
            say(event="step", model=kind, engine=dtype, mode=mode, step=v, loss=round(loss, 4),
                weight_problems=problems[:3], tensors=counts, refit_ms=round(row["ms"][-1], 2),
                **fig)
            for key, worst in (("diff", max), ("tol", min), ("within", min), ("same", max),
                               ("same_tol", min)):
                row[key] = fig[key] if v == 1 else worst(row[key], fig[key])
            if why:
                row["detail"] = f"step {v}: {why}"
                return row
            row["steps"] = v
            if v == 1:
                lowp = quant in ("mxfp8", "nvfp4")
                fmt = quant.upper() if lowp else "FP8"
                layout = " ".join(x for x in (quant if lowp else "", kernel or "",
                                              f"recipe={recipe}" if recipe else "") if x)
                row["detail"] = (f"{counts['equal']} tensors bit-equal, {counts['fp8']} {fmt} "
                                 f"within {'its' if lowp else 'e4m3'} rounding"
                                 + (f", {counts['vllm_exact']} bit-equal to vLLM's {layout} "
                                    f"layout" if layout and not sglang else "")
                                 + (f", {counts['vllm_exact']} bit-equal to the reference "
                                    f"{kernel or 'checkpoint'} layout" if sglang else ""))
        if sglang:
            rls.leave(engine.client)
        member.close()
        member = None
        rc = engine.finish()
        if rc != 0:
            row["detail"] = f"engine exit code {rc}"
            return row
        row["ok"] = True
        return row
    except Exception as e:  # the row fails with the reason
        row["detail"] = f"{type(e).__name__}: {e}"
        if isinstance(engine, EngineProcess):
            row["detail"] += " | engine: " + " | ".join(engine.lines[-3:])
        return row
    finally:
        if member is not None:
            member.close()
        if isinstance(engine, EngineProcess) and engine.proc.poll() is None:
            engine.proc.kill()
            engine.proc.wait()
        d.kill()
        d.wait()


def refused_as_expected(engine, row):
    """After a join that had to fail: the worker's refusal, which must name
    a layer the stand-in holds in a layout refit does not write; sets
    row["ok"] and row["refused"] when it does; returns the row's detail."""
    try:
        engine.result(1, timeout=30)
    except EngineError as e:
        said = " | ".join(str(e).splitlines())[:400]
        layers = [n for n in e.info.get("foreign", []) if f"layer {n}:" in str(e)]
        if layers:
            row["ok"] = row["refused"] = True
            return f"refused at registration: {said}"
        return f"refused, but naming none of the layers SGLang holds so: {said}"
    return "the worker reported no refusal"


BACKENDS = ("vllm", "sglang")


def plan_rows(argv):
    """(bundle, options, rows as (backend, model, engine, mode)) from the
    command line (backends outermost, then models, engines, modes; the
    MXFP8 / NVFP4 engines for the vllm backend alone, nvfp4-vllm for the
    MoE model alone: rl_loop_tables.runs). Raises
    ValueError naming an unknown or empty option, backend, engine or mode."""
    if not argv or argv[0].startswith("--"):
        raise ValueError("the bundle folder comes first")
    bundle = os.path.abspath(argv[0])
    opts = dict(steps="3", models="qwen3,qwen3-moe",
                engines=",".join(ENGINE_CONVENTIONS), backends="vllm",
                modes="process,threads", device="cuda:0", reference="transformers", experts="",
                refitd=os.path.join(bundle, "refitd"))
    for a in argv[1:]:
        key, _, value = a.lstrip("-").partition("=")
        if key not in opts or not value:
            raise ValueError(f"unknown or empty option {a}")
        opts[key] = value
    rows = []
    for backend in opts["backends"].split(","):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
        for kind in opts["models"].split(","):
            for dtype in opts["engines"].split(","):
                for mode in opts["modes"].split(","):
                    if mode not in ("process", "threads") or dtype not in ENGINE_CONVENTIONS:
                        raise ValueError(f"unknown mode {mode} or engine {dtype}")
                    if runs(backend, kind, dtype):
                        rows.append((backend, kind, dtype, mode))
    return bundle, opts, rows


def main(argv):
    try:
        bundle, opts, planned = plan_rows(argv)
    except ValueError as e:
        print(f"{e}\n{__doc__}", file=sys.stderr)
        return 2
    use_bundle(bundle)
    torch = torch_setup()
    import refit
    device = opts["device"]
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    if opts["reference"] == "transformers":
        import transformers
        print(f"transformers {transformers.__version__}", flush=True)
    refit.load_library(gpu=device.startswith("cuda"))
    print(f"refit client library {refit.loaded_library_path()}", flush=True)
    rows = []
    for backend, kind, dtype, mode in planned:
        t0 = time.monotonic()
        row = run_row(bundle, opts["refitd"], kind, dtype, mode, int(opts["steps"]),
                      device, opts["reference"], opts["experts"], backend)
        say(event="row", took_s=round(time.monotonic() - t0, 1),
            **{k: v for k, v in row.items() if k not in ("ms", "round_ms")})
        rows.append(row)
    from rl_loop_report import print_table
    print_table(rows)
    return 0 if rows and all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--engine":
        try:
            sys.exit(engine_main(sys.argv[2:]))
        except Exception as e:  # reported, then a failing exit code
            say(event="error", message=f"{type(e).__name__}: {e}")
            sys.exit(1)
    sys.exit(main(sys.argv[1:]))
