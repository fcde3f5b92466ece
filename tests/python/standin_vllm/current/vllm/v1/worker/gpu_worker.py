"""Stand-in of vllm/v1/worker/gpu_worker.py's weight-transfer session and of
the LLM entry points that drive it, current generation (vLLM main as read
2026-11-25, 055e47c): standin_vllm/session.py's, over this generation's
factory (vllm.backends.distributed.weight_transfer);
LLM.finish_weight_update(weight_version=None) records the version."""
from standin_vllm import session
from vllm.backends.distributed.weight_transfer.factory import WeightTransferEngineFactory


class Worker(session.Worker):
    factory = WeightTransferEngineFactory


LLM = session.LLM
