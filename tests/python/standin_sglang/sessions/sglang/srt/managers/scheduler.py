"""The session line's scheduler update path (scheduler_components/
weight_updater.py with _WeightUpdateSession): updates only between
begin_weight_update and end_weight_update, answered (False, message)
otherwise; the selector ("target", "draft", "all") picks the runners, and
begin's selector is the one end finalizes; begin restores the runners'
quant state, end runs process_weights_after_loading (and post-load only
when nothing was loaded); a version is recorded when end commits; end
checks expected_base_weight_checksums ({str(tp_rank): {name: SHA-256}})
before finalizing and refuses a mismatch."""
import hashlib

from sglang.srt.managers import io_struct
from sglang.srt.utils import MultiprocessingSerializer
from standin_sglang_runtime import EngineBase, SchedulerBase


def _roles(selector):
    if selector == "all":
        return {"target", "draft"}
    if selector in ("target", "draft"):
        return {selector}
    raise ValueError(f"invalid selector {selector!r}; expected 'target', 'draft', or 'all'")


def _out(success, message):
    return io_struct.UpdateWeightsFromTensorReqOutput(success=success, message=message)


class Scheduler(SchedulerBase):
    def __init__(self, models, server_args, drafts=None):
        super().__init__(models, server_args, drafts)
        self.weight_version = "default"
        self.session = None

    @staticmethod
    def _runners(w, selector):
        roles = _roles(selector)
        out = [w.model_runner] if "target" in roles else []
        if "draft" in roles and w.draft_runner is not None:
            out.append(w.draft_runner)
        return out

    def begin_weight_update(self, recv_req):
        if self.session is not None:
            return _out(False, "a weight-update session is already open; call "
                               "end_weight_update() first")
        self.on_every_worker(lambda w: [r.begin_weight_update()
                                        for r in self._runners(w, recv_req.selector)])
        self.session = {"selector": recv_req.selector, "loaded": False, "version": None}
        return _out(True, "Success")

    def update_weights_from_tensor(self, recv_req):
        if self.session is None:
            return io_struct.UpdateWeightsFromTensorReqOutput(
                success=False, message="update_weights_from_tensor must run between "
                                       "begin_weight_update() and end_weight_update()")

        def run(w):
            named = MultiprocessingSerializer.deserialize(
                recv_req.serialized_named_tensors[w.model_runner.tp_rank])
            for r in self._runners(w, recv_req.selector):
                ok, message = r.update_weights_from_tensor(named, recv_req.load_format)
                if not ok:
                    return ok, message
            return True, "Success"
        failed = [a for a in self.on_every_worker(run) if not a[0]]
        if not failed:
            self.session["loaded"] = True
            self.flush_cache_after_weight_update(recv_req)
            if recv_req.weight_version is not None:
                self.session["version"] = recv_req.weight_version
        return io_struct.UpdateWeightsFromTensorReqOutput(
            success=not failed, message=failed[0][1] if failed else "Success")

    def _checksum_mismatch(self, expected):
        for w in self.workers:
            params = dict(w.model_runner.model.named_parameters())
            for name, sha in expected.get(str(w.model_runner.tp_rank), {}).items():
                p = params.get(name)
                if p is None or hashlib.sha256(p.raw()).hexdigest() != sha:
                    return f"checksum mismatch for {name!r} on tp rank {w.model_runner.tp_rank}"
        return None

    def end_weight_update(self, recv_req):
        if self.session is None:
            return _out(False, "no weight-update session is open; call "
                               "begin_weight_update() first")
        session, self.session = self.session, None
        if recv_req.expected_base_weight_checksums is not None:
            why = self._checksum_mismatch(recv_req.expected_base_weight_checksums)
            if why:
                return _out(False, why)
        self.on_every_worker(lambda w: [r.end_weight_update(not session["loaded"])
                                        for r in self._runners(w, session["selector"])])
        if session["version"] is not None:
            self.weight_version = session["version"]
        return _out(True, "Success")


class Engine(EngineBase):
    io_struct = io_struct
    scheduler_cls = Scheduler
