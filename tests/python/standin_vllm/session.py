"""The weight-transfer session of vllm/v1/worker/gpu_worker.py and the LLM
entry points that drive it (vllm/entrypoints/llm.py), as both generations
of the vllm stand-in have them (each generation's vllm/v1/worker/
gpu_worker.py names its factory and what differs), written for refit's
tests:
- the worker builds its engine with WeightTransferEngineFactory.create_engine(
  config, vllm_config, device, model) at load time;
- start_weight_update / start_draft_weight_update (refused with RuntimeError
  "<Engine> does not support draft model weight updates." when the engine's
  supports_draft_weight_update is false; otherwise the engine is retargeted
  at the draft model, and reset on failure and at finish);
- update_weights requires an active session; a list payload is indexed by
  data_parallel_index * world_size + rank; finish_weight_update resets the
  target and, after an update that was not a draft update, unloads every
  LoRA adapter (model_runner.reset_lora_state());
- start_lora_weight_update(info) (vLLM main, 2026-12-06): the adapter must
  be loaded (ValueError "... must be loaded"), the engine must support LoRA
  updates (RuntimeError "<Engine> does not support LoRA weight updates"),
  then the engine is retargeted at the adapter with
  requires_model_reload=False;
- compute_weight_checksums(): vLLM's weight checker's per-worker answer,
  one SHA-256 of each parameter's raw bytes keyed
  dp{d}:pp{p}:pcp{c}:tp{t}:ep{e}:{name}, the EP rank only for MoE models;
- LLM.finish_weight_update(weight_version=None) runs the workers' finish,
  then records the version (set_weight_version)."""
import hashlib
import types


class Worker:
    """The GPU worker's weight-update session; ``factory`` is the
    generation's WeightTransferEngineFactory (set by its gpu_worker.py)."""

    factory = None

    def __init__(self, *, backend, parallel_config, model, draft_model=None,
                 device="cpu", moe=False):
        self.parallel_config = parallel_config
        self.model, self.moe = model, moe
        self.lora_adapters = set()  # loaded LoRA adapter ids
        self.lora_resets = 0
        self.vllm_config = types.SimpleNamespace(
            parallel_config=parallel_config,
            model_config=types.SimpleNamespace(model="stand-in"),
            speculative_config=(types.SimpleNamespace(draft_model_config="draft")
                                if draft_model is not None else None))
        self.draft_model = draft_model
        self.weight_transfer_engine = self.factory.create_engine(
            types.SimpleNamespace(backend=backend), self.vllm_config, device, model)
        self._active = False
        self._is_draft = False

    def init_weight_transfer_engine(self, init_info):
        e = self.weight_transfer_engine
        e.init_transfer_engine(e.parse_init_info(init_info))

    def start_weight_update(self):
        self._start(False)

    def start_draft_weight_update(self):
        self._start(True)

    def _start(self, is_draft):
        e = self.weight_transfer_engine
        if is_draft and not e.supports_draft_weight_update:
            raise RuntimeError(f"{type(e).__name__} does not support draft model "
                               f"weight updates.")
        if self._active:
            raise RuntimeError("start_weight_update called while a weight update is "
                               "already active. Call finish_weight_update first.")
        try:
            if is_draft:
                if self.draft_model is None:
                    raise RuntimeError("Draft model weight update requested, but no "
                                       "draft model is configured.")
                e.set_weight_update_target(self.draft_model,
                                           self.vllm_config.speculative_config.draft_model_config)
            e.start_weight_update()
        except BaseException:
            e.reset_weight_update_target()
            raise
        self._active, self._is_draft = True, is_draft

    def update_weights(self, update_info):
        if not self._active:
            raise RuntimeError("start_weight_update must be called before update_weights.")
        if isinstance(update_info, list):
            pc = self.parallel_config
            update_info = update_info[pc.data_parallel_index * pc.world_size + pc.rank]
        try:
            self.weight_transfer_engine.update_weights(update_info)
        except BaseException:
            self._active = False
            self.weight_transfer_engine.reset_weight_update_target()
            raise

    def finish_weight_update(self):
        if not self._active:
            raise RuntimeError("finish_weight_update called without a matching "
                               "start_weight_update.")
        self.weight_transfer_engine.finish_weight_update()
        self.weight_transfer_engine.reset_weight_update_target()
        self._active = False
        if not self._is_draft:
            self.reset_lora_state()

    def reset_lora_state(self):
        self.lora_adapters.clear()
        self.lora_resets += 1

    def start_lora_weight_update(self, info):
        e = self.weight_transfer_engine
        if info["lora_int_id"] not in self.lora_adapters:
            raise ValueError(f"LoRA adapter {info['lora_int_id']} must be loaded before "
                             f"its weights can be updated")
        if not getattr(e, "supports_lora_weight_update", False):
            raise RuntimeError(f"{type(e).__name__} does not support LoRA weight updates.")
        if self._active:
            raise RuntimeError("start_weight_update called while a weight update is "
                               "already active. Call finish_weight_update first.")
        try:
            e.set_weight_update_target(("lora", info["lora_int_id"]), None,
                                       requires_model_reload=False)
            e.start_weight_update()
        except BaseException:
            e.reset_weight_update_target()
            raise
        self._active, self._is_draft = True, False

    def compute_weight_checksums(self):
        pc = self.parallel_config
        ep = pc.data_parallel_index * pc.tensor_parallel_size + pc.rank if self.moe else 0
        prefix = f"dp{pc.data_parallel_index}:pp0:pcp0:tp{pc.rank}:ep{ep}:"
        return {prefix + n: hashlib.sha256(p.raw()).hexdigest()
                for n, p in self.model.named_parameters()}

    def shutdown(self):
        self.weight_transfer_engine.shutdown()


class LLM:
    """The weight-sync methods of vllm.LLM over in-process workers: each
    call runs on every worker concurrently (collective_rpc)."""

    def __init__(self, workers):
        self.workers = workers
        self.weight_version = None

    def _rpc(self, method, *args):
        import threading
        errors = []

        def run(w):
            try:
                getattr(w, method)(*args)
            except BaseException as e:
                errors.append(e)
        ts = [threading.Thread(target=run, args=(w,)) for w in self.workers]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        if errors:
            raise errors[0]

    def init_weight_transfer_engine(self, init_info):
        self._rpc("init_weight_transfer_engine", dict(init_info))

    def start_weight_update(self):
        self._rpc("start_weight_update")

    def start_draft_weight_update(self):
        self._rpc("start_draft_weight_update")

    def update_weights(self, update_info):
        self._rpc("update_weights", update_info)

    def finish_weight_update(self, weight_version=None):
        self._rpc("finish_weight_update")
        if weight_version is not None:
            self.weight_version = weight_version
