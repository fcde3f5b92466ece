"""Stand-in of vllm/v1/worker/gpu_worker.py's weight-transfer session and of
the LLM entry points that drive it, current generation (vLLM main as read
2026-12-06): standin_vllm/session.py's, over vllm.distributed.weight_transfer's
factory; LLM.finish_weight_update(weight_version=None) records the version."""
from standin_vllm import session
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory


class Worker(session.Worker):
    factory = WeightTransferEngineFactory


LLM = session.LLM
