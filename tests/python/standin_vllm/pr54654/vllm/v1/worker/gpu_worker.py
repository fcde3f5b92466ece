"""Stand-in of vllm/v1/worker/gpu_worker.py as built from the unmerged
vllm-project/vllm#54654: standin_vllm/session.py's session over
vllm.backends.distributed.weight_transfer's factory."""
from standin_vllm import session
from vllm.backends.distributed.weight_transfer.factory import WeightTransferEngineFactory


class Worker(session.Worker):
    factory = WeightTransferEngineFactory


LLM = session.LLM
