"""Stand-in of vllm/distributed/weight_transfer/base.py, pinned generation:
vllm-project/vllm commit 02f250b03f38822ccdb63f27a3005d10ca81f385. What
refit relies on, written for refit's tests (no torch; no vLLM code):
- TrainerInitInfo(WeightTransferInitInfo): keyword-only `rank`, no backend.
- WeightTransferEngine(config, vllm_config, device, model), draft targets,
  and the abstract static trainer_send_weights hook.
- TrainerWeightTransferEngine(config, *, client, source, is_sender=True) and
  trainer_init(cls, config, init_info, *, client, source).
- VLLMWeightSyncClient.finish_weight_update() takes no version."""
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Tuple

from standin_vllm import engine_base

GENERATION = "pinned"


@dataclass(frozen=True)
class ParamMeta:
    name: str
    dtype: Any
    shape: Tuple[int, ...]


class WeightSource(ABC):
    @abstractmethod
    def metadata(self):
        ...

    @abstractmethod
    def __iter__(self):
        ...


@dataclass
class WeightTransferInitInfo(ABC):  # noqa: B024
    pass


@dataclass
class TrainerInitInfo(WeightTransferInitInfo):
    rank: int = field(kw_only=True)

    @property
    def is_sender(self) -> bool:
        return self.rank == 0


@dataclass
class WeightTransferUpdateInfo(ABC):  # noqa: B024
    pass


class WeightTransferEngine(engine_base.WeightTransferEngine):
    """standin_vllm/engine_base.py's, with this generation's abstract hook."""

    @staticmethod
    @abstractmethod
    def trainer_send_weights(iterator, trainer_args) -> None: ...


class TrainerWeightTransferEngine(ABC):
    init_info_cls: Any
    config_cls: Any

    def __init__(self, config: Any, *, client: Any, source: WeightSource,
                 is_sender: bool = True) -> None:
        self.config = config
        self.is_sender = is_sender
        self.client = client
        self.source = source

    @classmethod
    @abstractmethod
    def trainer_init(cls, config, init_info, *, client, source): ...

    @abstractmethod
    def send_weights(self) -> None: ...

    def shutdown(self) -> None:
        pass
