"""Stand-in of vLLM's weight_transfer/factory.py, current generation: vLLM
main's vllm/distributed/weight_transfer/factory.py (read 2026-12-06), which
vllm-project/vllm#54654 (055e47c, unmerged) moved under vllm/backends/.
Lazy registries by name; the worker factory builds engine_cls(config,
vllm_config, device, model); the trainer factory dispatches on
init_info.backend and calls
engine_cls.trainer_init(init_info=..., client=..., source=...)."""
from standin_vllm.registry import WeightTransferEngineFactory, _Registry

__all__ = ["WeightTransferEngineFactory", "WeightTransferTrainerFactory"]


class WeightTransferTrainerFactory(_Registry):
    _registry = {}

    @classmethod
    def trainer_init(cls, *, init_info, client, source=None):
        backend = init_info.backend
        if backend not in cls._registry:
            raise ValueError(f"Invalid weight transfer backend: {backend}. "
                             f"Available trainer engines: {list(cls._registry)}")
        return cls._registry[backend]().trainer_init(init_info=init_info, client=client,
                                                     source=source)
