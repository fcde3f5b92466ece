"""Stand-in of vllm/distributed/weight_transfer/factory.py, pinned
generation: vllm-project/vllm commit 047c993cc49c32e9b94f5bf826a9214e163eb982
(written for refit's tests, no vLLM code): lazy registries by name; the
trainer factory takes the backend name and a config and calls
engine_cls.trainer_init(config=..., init_info=..., client=..., source=...)."""
from standin_vllm.registry import WeightTransferEngineFactory, _Registry

__all__ = ["WeightTransferEngineFactory", "WeightTransferTrainerFactory"]


class WeightTransferTrainerFactory(_Registry):
    _registry = {}

    @classmethod
    def trainer_init(cls, backend, config, init_info, *, client, source):
        if backend not in cls._registry:
            raise ValueError(f"Invalid weight transfer backend: {backend}. "
                             f"Available trainer engines: {list(cls._registry)}")
        return cls._registry[backend]().trainer_init(config=config, init_info=init_info,
                                                     client=client, source=source)
