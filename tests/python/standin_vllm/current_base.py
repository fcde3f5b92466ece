"""Stand-in of vLLM's weight_transfer/base.py, current generation: vLLM main's
vllm/distributed/weight_transfer/base.py as read 2026-12-06 (the version
defining WeightTransferUpdatePayload = dict | list[dict]; the trainer side
as reworked by vllm-project/vllm#50902, with TrainerInitInfo.backend), which
the unmerged reorganisation vllm-project/vllm#54654 (a8f1d79) moved to
vllm/backends/distributed/weight_transfer/base.py unchanged. Both layouts
alias this module (standin_vllm/current, standin_vllm/pr54654). What refit relies on, written for refit's tests
(no torch; no vLLM code):
- TrainerInitInfo: keyword-only `rank`, a class-level `backend` that every
  subclass must set (TypeError at class creation otherwise), is_sender.
- WeightTransferEngine(config, vllm_config, device, model); draft targets
  (supports_draft_weight_update, set/reset_weight_update_target); no
  trainer_send_weights; update_weights parses, receives, synchronizes.
- TrainerWeightTransferEngine(*, client, source=None, is_sender=True) and
  trainer_init(cls, init_info, *, client, source=None): no config.
- VLLMWeightSyncClient.finish_weight_update(weight_version=None)."""
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Tuple

from standin_vllm import engine_base

GENERATION = "current"


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
class TrainerInitInfo:
    backend: ClassVar[str]
    rank: int = field(kw_only=True)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not getattr(cls, "backend", None):
            raise TypeError(f"{cls.__name__} must set a class-level `backend` string")

    @property
    def is_sender(self) -> bool:
        return self.rank == 0


@dataclass
class WeightTransferUpdateInfo(ABC):  # noqa: B024
    pass


class WeightTransferEngine(engine_base.WeightTransferEngine):
    """standin_vllm/engine_base.py's (this generation has no trainer_send_weights)."""


class TrainerWeightTransferEngine(ABC):
    init_info_cls: Any

    def __init__(self, *, client: Any, source: Optional[WeightSource] = None,
                 is_sender: bool = True) -> None:
        self.is_sender = is_sender
        self.client = client
        self.source = source

    @classmethod
    @abstractmethod
    def trainer_init(cls, init_info, *, client, source=None): ...

    @abstractmethod
    def send_weights(self) -> None: ...

    def shutdown(self) -> None:
        pass
