"""Stand-in of vllm/backends/distributed/weight_transfer/factory.py, current
generation: vllm-project/vllm 055e47c28003156421365af985d676fc921cb075.
Lazy registries by name; the worker factory builds engine_cls(config,
vllm_config, device, model); the trainer factory dispatches on
init_info.backend and calls
engine_cls.trainer_init(init_info=..., client=..., source=...)."""
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
    def trainer_init(cls, *, init_info, client, source=None):
        backend = init_info.backend
        if backend not in cls._registry:
            raise ValueError(f"Invalid weight transfer backend: {backend}. "
                             f"Available trainer engines: {list(cls._registry)}")
        return cls._registry[backend]().trainer_init(init_info=init_info, client=client,
                                                     source=source)
