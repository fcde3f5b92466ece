"""SGLang main's scheduler update path (scheduler_components/
weight_updater.py at b2d53a07): the update goes to the speculative worker
(target, then draft) unless the request says disable_draft_model; on
success the prefix cache is flushed when asked (asserting the flush) and the
request's weight_version becomes the engine's."""
from sglang.srt.managers import io_struct
from sglang.srt.utils import MultiprocessingSerializer
from standin_sglang_runtime import EngineBase, SchedulerBase


class Scheduler(SchedulerBase):
    def __init__(self, models, server_args, drafts=None):
        super().__init__(models, server_args, drafts)
        self.weight_version = "default"

    def update_weights_from_tensor(self, recv_req):
        def run(w):
            named = MultiprocessingSerializer.deserialize(
                recv_req.serialized_named_tensors[w.model_runner.tp_rank])
            runners = [w.model_runner]
            if not recv_req.disable_draft_model and w.draft_runner is not None:
                runners.append(w.draft_runner)
            for r in runners:
                ok, message = r.update_weights_from_tensor(named, recv_req.load_format)
                if not ok:
                    return ok, message
            return True, "Success"
        answers = self.on_every_worker(run)
        failed = [a for a in answers if not a[0]]
        if not failed:
            self.flush_cache_after_weight_update(recv_req)
            if recv_req.weight_version is not None:
                self.weight_version = recv_req.weight_version
        return io_struct.UpdateWeightsFromTensorReqOutput(
            success=not failed, message=failed[0][1] if failed else "Success")


class Engine(EngineBase):
    io_struct = io_struct
    scheduler_cls = Scheduler
