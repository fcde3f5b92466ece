"""Stand-ins of SGLang's scheduler and engine for update_weights_from_tensor
(see sglang/__init__.py): the engine sends the request to every TP worker of
each DP replica (the same request to every replica, as SGLang's data
parallel controller forwards control requests); each scheduler runs its TP
workers' model runners (concurrently: one process each in SGLang) and, when
all succeeded and the request says flush_cache, flushes the prefix (radix)
cache before serving again."""
import threading
import types

from sglang.srt.model_executor.model_runner import ModelRunner


class Scheduler:
    def __init__(self, models, server_args, pp_size: int = 1):
        self.runners = [ModelRunner(m, server_args, r, len(models), pp_size)
                        for r, m in enumerate(models)]
        self.cache_flushes = 0

    def flush_cache(self) -> bool:
        self.cache_flushes += 1
        return True

    def update_weights_from_tensor(self, named_tensors, load_format, flush_cache):
        results = [None] * len(self.runners)

        def run(i):
            results[i] = self.runners[i].update_weights_from_tensor(named_tensors,
                                                                     load_format)
        ts = [threading.Thread(target=run, args=(i,)) for i in range(len(self.runners))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        success = all(r is not None and r[0] for r in results)
        if success and flush_cache:
            self.flush_cache()
        return success, "Success" if success else "failed"


class Engine:
    """sglang.Engine's update_weights_from_tensor over in-process replicas
    (one Scheduler per DP replica)."""

    def __init__(self, replicas, custom_weight_loader=()):
        self.server_args = types.SimpleNamespace(custom_weight_loader=list(custom_weight_loader))
        self.schedulers = [Scheduler(models, self.server_args) for models in replicas]

    def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True):
        out = [None] * len(self.schedulers)

        def run(i):
            out[i] = self.schedulers[i].update_weights_from_tensor(
                named_tensors, load_format, flush_cache)
        ts = [threading.Thread(target=run, args=(i,)) for i in range(len(self.schedulers))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return all(o[0] for o in out), "Success"
