"""The worker-side WeightTransferEngine base of vllm's weight_transfer/base.py,
as both generations of the vllm stand-in have it (written for refit's
tests, no vLLM code): constructed with (config, vllm_config, device,
model); draft targets (supports_draft_weight_update,
set/reset_weight_update_target); dict -> dataclass parsing raising
ValueError; update_weights parses and receives. The pinned generation adds
the abstract trainer_send_weights hook."""
from abc import ABC, abstractmethod
from typing import Any


class WeightTransferEngine(ABC):
    init_info_cls: Any
    update_info_cls: Any
    supports_draft_weight_update: bool = True

    def __init__(self, config: Any, vllm_config: Any, device: Any, model: Any) -> None:
        self.config = config
        self.vllm_config = vllm_config
        self.parallel_config = vllm_config.parallel_config
        self.model_config = vllm_config.model_config
        self.device = device
        self.model = model
        self._default_model_config = self.model_config
        self._default_model = model

    def set_weight_update_target(self, model: Any, model_config: Any) -> None:
        self.model = model
        self.model_config = model_config

    def reset_weight_update_target(self) -> None:
        self.model = self._default_model
        self.model_config = self._default_model_config

    def parse_init_info(self, init_dict):
        try:
            return self.init_info_cls(**init_dict)
        except TypeError as e:
            raise ValueError(f"Invalid init_info for {type(self).__name__}: {e}") from e

    def parse_update_info(self, update_dict):
        try:
            return self.update_info_cls(**update_dict)
        except TypeError as e:
            raise ValueError(f"Invalid update_info for {type(self).__name__}: {e}") from e

    @abstractmethod
    def init_transfer_engine(self, init_info) -> None: ...

    @abstractmethod
    def start_weight_update(self) -> None: ...

    @abstractmethod
    def finish_weight_update(self) -> None: ...

    def update_weights(self, update_info) -> None:
        self.receive_weights(self.parse_update_info(update_info))

    @abstractmethod
    def receive_weights(self, update_info) -> None: ...

    @abstractmethod
    def shutdown(self) -> None: ...
