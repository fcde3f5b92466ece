"""A minimal stand-in for the vLLM side of vllm.distributed.weight_transfer,
for tests without vLLM: a factory that registers engines by name (lazily by
module path, or by class) and creates one per worker with (config,
vllm_config, device, model); workers that run the documented protocol in
order (init_transfer_engine with the parsed init info; per update
start_weight_update, update_weights, finish_weight_update; shutdown); and a
client with the four VLLMWeightSyncClient methods (finish_weight_update
taking vLLM's weight_version) that fans each call out to every worker, as
vLLM's engine client does. Every call is recorded."""

import importlib
import types
from typing import Any, Dict, List


class Factory:
    """WeightTransferEngineFactory's registry contract."""

    def __init__(self):
        self._registry: Dict[str, Any] = {}

    def register_engine(self, name: str, module_path_or_cls: Any, class_name: str = None):
        if name in self._registry:
            raise ValueError(f"Weight transfer engine '{name}' is already registered.")
        if isinstance(module_path_or_cls, str):
            if class_name is None:
                raise ValueError("class_name is required when registering with module path")
            self._registry[name] = lambda: getattr(
                importlib.import_module(module_path_or_cls), class_name)
        else:
            self._registry[name] = lambda: module_path_or_cls

    def create_engine(self, config: Any, vllm_config: Any, device: Any, model: Any):
        if config.backend not in self._registry:
            raise ValueError(f"Invalid weight transfer backend: {config.backend}")
        return self._registry[config.backend]()(config, vllm_config, device, model)


def vllm_config(rank: int) -> Any:
    """The parts of a VllmConfig an engine reads."""
    return types.SimpleNamespace(parallel_config=types.SimpleNamespace(
                                     rank=rank, tensor_parallel_size=1,
                                     data_parallel_size=1, data_parallel_index=0),
                                 model_config=types.SimpleNamespace(model="stand-in"))


class Worker:
    """One inference worker holding its model and its engine."""

    def __init__(self, factory: Factory, backend: str, rank: int, model: Any):
        config = types.SimpleNamespace(backend=backend)
        self.engine = factory.create_engine(config, vllm_config(rank),
                                            types.SimpleNamespace(type="cpu", index=None),
                                            model)
        self.calls: List[str] = []

    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None:
        self.calls.append("init")
        self.engine.init_transfer_engine(self.engine.parse_init_info(dict(init_info)))

    def start_weight_update(self) -> None:
        self.calls.append("start")
        self.engine.start_weight_update()

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        self.calls.append("update")
        self.engine.update_weights(dict(update_info))

    def finish_weight_update(self) -> None:
        self.calls.append("finish")
        self.engine.finish_weight_update()

    def shutdown(self) -> None:
        self.calls.append("shutdown")
        self.engine.shutdown()


class Client:
    """VLLMWeightSyncClient over in-process workers: each call goes to
    every worker in turn (one worker per engine in these tests)."""

    def __init__(self, workers: List[Worker]):
        self.workers = workers
        self.weight_versions: List[str] = []

    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None:
        for w in self.workers:
            w.init_weight_transfer_engine(init_info)

    def start_weight_update(self) -> None:
        for w in self.workers:
            w.start_weight_update()

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        for w in self.workers:
            w.update_weights(update_info)

    def finish_weight_update(self, weight_version: str = None) -> None:
        for w in self.workers:
            w.finish_weight_update()
        if weight_version is not None:
            self.weight_versions.append(weight_version)
