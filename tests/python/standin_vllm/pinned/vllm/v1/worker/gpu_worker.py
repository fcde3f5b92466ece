"""Stand-in of vllm/v1/worker/gpu_worker.py's weight-transfer session and of
the LLM entry points that drive it, pinned generation (vllm-project/vllm
02f250b03f38822ccdb63f27a3005d10ca81f385: the engine base there already has
draft targets): standin_vllm/session.py's, over this generation's factory
(vllm.distributed.weight_transfer); LLM.finish_weight_update() takes no
version."""
from standin_vllm import session
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory


class Worker(session.Worker):
    factory = WeightTransferEngineFactory


class LLM(session.LLM):
    def finish_weight_update(self):
        self._rpc("finish_weight_update")
