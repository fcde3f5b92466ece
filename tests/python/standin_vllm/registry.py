"""The weight-transfer engine registries of vllm's factory.py, as both
generations of the vllm stand-in have them (written for refit's tests, no
vLLM code): lazy registries by name; the worker factory builds
engine_cls(config, vllm_config, device, model). Each generation's
factory.py adds its trainer factory."""
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
