"""rl_loop_gpu.py's SGLang rows (--backends=sglang): the engine is
sglang_standin.py's SGLang (Engine -> Scheduler -> ModelRunner with
--custom-weight-loader refit.sglang.load, answering as SGLang's session line
does: updates only inside begin_weight_update ... end_weight_update) over
stand-in layers of the row's SGLang setup, holding refit's engine buffers
for the sglang:tp=1 convention as its parameters; the trainer joins and
updates it through refit.sglang's trainer side (join_engine, then
sync_weights(pause=True) per step: pause, session, update, end, continue),
and refit.sglang detects the kernel layout from the layers
(refit.engine_layouts' sglang_kernel_layout), runs the post-load steps and
flushes the prefix cache, paused, after every round.

Setups whose layers SGLang holds in a layout refit does not write (FP8
experts in FlashInfer CUTLASS, DeepGEMM's int32-packed UE8M0 scales) test
the refusal: the worker's init request must fail at registration naming
the layer (refit.sglang records it and tells refitd; join_engine then
fails within REFUSAL_WAIT s with the worker's refusal), and the row reads
REFUSED.

In process mode the trainer reaches the engine process as it reaches an
SGLang server over HTTP: each call (update_weights_from_tensor,
begin_weight_update, end_weight_update, pause_generation,
continue_generation) goes as a file into the work folder and is answered by
a file (FileClient / serve_files).
"""
import json
import os
import threading
import time

CONVENTIONS = {"bf16": "sglang:tp=1", "fp8": "sglang:tp=1,quant=fp8",
               "flashinfer": "sglang:tp=1", "flashinfer-fp8": "sglang:tp=1,quant=fp8",
               "deepgemm": "sglang:tp=1,quant=fp8"}
KERNEL_READ = {"flashinfer": "flashinfer"}  # the layout the setup's kernels read
REFUSAL_WAIT = 4.0  # seconds join_engine waits where the worker must refuse
ENGINE_ID = "e0"


class ServedEngine:
    """The engine side: the stand-in SGLang engine over the row's layers,
    and after each refit update that committed a new version, the step's
    result (logits, tensors) handed to ``deliver(v, result)``; a worker's
    refit.sglang error goes to ``deliver(None, {"error": message})``."""

    def __init__(self, tensors, setup, step_result, deliver):
        import refit.sglang as rs
        import sglang_standin as ss
        self.rs, self.tensors, self.setup = rs, tensors, setup
        self.model, self.foreign = ss.build_model(tensors, setup)
        self.engine = ss.Engine([self.model], custom_weight_loader=[rs.LOADER])
        self.step_result, self.deliver = step_result, deliver
        self.version = 0
        rs.parallel_ranks = ss.parallel_ranks

    def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True,
                                   **fields):
        before = len(self.rs.last_errors)
        out = self.engine.update_weights_from_tensor(named_tensors, load_format, flush_cache,
                                                     **fields)
        errors = self.rs.last_errors[before:]
        r = self.rs.receiver(self.model)
        if errors:
            self.deliver(None, {"error": errors[-1], "foreign": self.foreign})
        elif r is not None and r.version > self.version:
            self.version = r.version
            path = (f"refit.sglang, kernel={r.kernel or 'checkpoint'} detected, "
                    f"{self.engine.cache_flushes} cache flushes")
            self.deliver(r.version, self.step_result(self.tensors, KERNEL_READ.get(self.setup),
                                                     path, r.last_stats.get("seconds", 0.0)))
        return out

    def begin_weight_update(self, selector="all"):
        return self.engine.begin_weight_update(selector)

    def end_weight_update(self, **fields):
        return self.engine.end_weight_update(**fields)

    def pause_generation(self):
        return self.engine.pause_generation()

    def continue_generation(self):
        return self.engine.continue_generation()


class FileClient:
    """The trainer's handle on the engine process: the engine's calls as
    request / answer files (refit's requests carry empty tensors, so the
    names are the request). ``alive()``: whether the engine process runs."""

    def __init__(self, workdir, alive, timeout):
        self.dir, self.alive, self.timeout = workdir, alive, timeout
        self.n = 0
        self.lock = threading.Lock()

    def _call(self, call, **kwargs):
        with self.lock:
            n, self.n = self.n, self.n + 1
        tmp = os.path.join(self.dir, f".req{n}.json")
        with open(tmp, "w") as f:
            json.dump({"call": call, "kwargs": kwargs}, f)
        os.replace(tmp, os.path.join(self.dir, f"req{n}.json"))
        answer = os.path.join(self.dir, f"resp{n}.json")
        t_end = time.monotonic() + self.timeout
        while time.monotonic() < t_end:
            if os.path.exists(answer):
                with open(answer) as f:
                    got = json.load(f)
                if "raised" in got:
                    raise RuntimeError(got["raised"])
                res = got["result"]
                return tuple(res) if isinstance(res, list) else res
            if not self.alive():
                raise RuntimeError("the engine process exited before answering")
            time.sleep(0.01)
        raise RuntimeError(f"the engine answered no {call} request within {self.timeout:g} s")

    def wait_ready(self):
        """Waits (bounded) until the engine process serves requests: its
        model is built. Raises RuntimeError when it exited or took longer."""
        t_end = time.monotonic() + self.timeout
        while not os.path.exists(os.path.join(self.dir, "ready")):
            if not self.alive():
                raise RuntimeError("the engine process exited before serving")
            if time.monotonic() > t_end:
                raise RuntimeError(f"the engine process did not serve within {self.timeout:g} s")
            time.sleep(0.01)

    def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True,
                                   **fields):
        return self._call("update_weights_from_tensor",
                          names=[name for name, _ in named_tensors], load_format=load_format,
                          flush_cache=flush_cache, **fields)

    def begin_weight_update(self, selector="all"):
        return self._call("begin_weight_update", selector=selector)

    def end_weight_update(self, **fields):
        return self._call("end_weight_update", **fields)

    def pause_generation(self):
        return self._call("pause_generation")

    def continue_generation(self):
        return self._call("continue_generation")


def serve_files(workdir, served, timeout):
    """The engine process: answers FileClient's requests in order until the
    session that carried a refit shutdown request ended, or none came
    within ``timeout``."""
    import torch
    n = 0
    leaving = False
    open(os.path.join(workdir, "ready"), "w").close()  # FileClient.wait_ready
    while True:
        path = os.path.join(workdir, f"req{n}.json")
        t_end = time.monotonic() + timeout
        while not os.path.exists(path):
            if time.monotonic() > t_end:
                raise RuntimeError(f"no request {n} within {timeout:g} s")
            time.sleep(0.01)
        with open(path) as f:
            req = json.load(f)
        call, kwargs = req["call"], dict(req["kwargs"])
        if call == "update_weights_from_tensor":
            names = kwargs.pop("names")
            leaving |= any('"op": "shutdown"' in name for name in names)
            kwargs["named_tensors"] = [(name, torch.empty(0, dtype=torch.uint8))
                                       for name in names]
        try:
            got = getattr(served, call)(**kwargs)
            ans = {"result": list(got) if isinstance(got, tuple) else got}
        except Exception as e:  # the trainer's call raises it
            ans = {"raised": f"{type(e).__name__}: {e}"}
        tmp = os.path.join(workdir, f".resp{n}.json")
        with open(tmp, "w") as f:
            json.dump(ans, f)
        os.replace(tmp, os.path.join(workdir, f"resp{n}.json"))
        n += 1
        if leaving and call == "end_weight_update":
            return


def join(engine, member, server, cfg_path, convention, transport, expect_refused, timeout):
    """The trainer's join (refit.sglang.join_engine). Returns None when it
    went as expected, else why the row fails. Where the worker must refuse,
    join_engine is given REFUSAL_WAIT s and must fail with the worker's
    refusal (FAILED_PRECONDITION "... refused to join: ...")."""
    import refit
    import refit.sglang as rs
    if hasattr(engine, "wait_ready"):  # an engine process: REFUSAL_WAIT starts once it serves
        engine.wait_ready()
    try:
        rs.join_engine(engine, member, server=server, engine_id=ENGINE_ID, model=cfg_path,
                       convention=convention, transport=transport,
                       timeout=REFUSAL_WAIT if expect_refused else timeout)
    except refit.RefitError as e:
        if not expect_refused:
            raise
        if isinstance(e, refit.FailedPreconditionError) and "refused to join" in e.message:
            return None
        return f"join_engine failed with {e.code_name} instead of the worker's refusal: {e}"
    if expect_refused:
        return ("refit.sglang registered the worker, though SGLang holds layers "
                "in a layout refit does not write")
    return None


def sync(engine, member, version, timeout):
    """One step's weight update (refit.sglang.sync_weights with the engine
    paused, trainer rank 0 of 1)."""
    import refit.sglang as rs
    rs.sync_weights(engine, member, engine_id=ENGINE_ID, version=version, rank=0, world=1,
                    timeout=timeout, pause=True)


def leave(engine):
    """Makes the engine's workers leave refit (refit.sglang.leave_engine,
    inside a session)."""
    import refit.sglang as rs
    rs.leave_engine(engine, engine_id=ENGINE_ID)


def expected_refusal(setup, kind):
    """Whether the stand-in's SGLang setup holds layers of this model kind
    in a layout refit does not write (the row must show the refusal)."""
    if setup == "deepgemm":
        return True
    return setup == "flashinfer-fp8" and kind == "qwen3-moe"
