"""Stand-in of vllm/distributed/weight_transfer/factory.py, pinned
generation: vllm-project/vllm commit 047c993cc49c32e9b94f5bf826a9214e163eb982
(written for refit's tests, no vLLM code): lazy registries by name; the
trainer factory takes the backend name and a config and calls
engine_cls.trainer_init(config=..., init_info=..., client=..., source=...)."""
import importlib


class _Registry:
    _registry: dict

    @classmethod
    def register_engine(cls, name, module_path_or_cls, class_name=None):
        if name in cls._registry:
            raise ValueError(f"Weight transfer engine '{name}' is already registered.")
        if isinstance(module_path_or_cls, str):
            if class_name is None:
                raise ValueError("class_name is required when registering with module path")
            cls._registry[name] = lambda: getattr(
                importlib.import_module(module_path_or_cls), class_name)
        else:
            cls._registry[name] = lambda: module_path_or_cls


class WeightTransferEngineFactory(_Registry):
    _registry = {}

    @classmethod
    def create_engine(cls, config, vllm_config, device, model):
        if config.backend not in cls._registry:
            raise ValueError(f"Invalid weight transfer backend: {config.backend}. "
                             f"Available engines: {list(cls._registry)}")
        return cls._registry[config.backend]()(config, vllm_config, device, model)


class WeightTransferTrainerFactory(_Registry):
    _registry = {}

    @classmethod
    def trainer_init(cls, backend, config, init_info, *, client, source):
        if backend not in cls._registry:
            raise ValueError(f"Invalid weight transfer backend: {backend}. "
                             f"Available trainer engines: {list(cls._registry)}")
        return cls._registry[backend]().trainer_init(config=config, init_info=init_info,
                                                     client=client, source=source)
