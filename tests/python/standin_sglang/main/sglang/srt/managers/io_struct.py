"""The request objects of SGLang main's weight updates (io_struct): no
session requests; an update may keep off the draft model
(disable_draft_model) and stamp a weight_version."""
from dataclasses import dataclass, field
from typing import Any, List, Optional


@dataclass
class UpdateWeightsFromTensorReqInput:
    serialized_named_tensors: List[Any] = field(default_factory=list)
    load_format: Optional[str] = None
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    disable_draft_model: Optional[bool] = None
    torch_empty_cache: bool = False


@dataclass
class UpdateWeightsFromTensorReqOutput:
    success: bool
    message: str


@dataclass
class PauseGenerationReqInput:
    mode: str = "abort"


@dataclass
class ContinueGenerationReqInput:
    pass
