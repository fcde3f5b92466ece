"""The request objects of SGLang's session line (io_struct): begin / end of
a weight-update session, a selector instead of disable_draft_model, and the
base-weight checksums end verifies."""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class UpdateWeightsFromTensorReqInput:
    serialized_named_tensors: List[Any] = field(default_factory=list)
    load_format: Optional[str] = None
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    selector: str = "all"
    torch_empty_cache: bool = False


@dataclass
class UpdateWeightsFromTensorReqOutput:
    success: bool
    message: str


@dataclass
class BeginWeightUpdateReqInput:
    selector: str = "all"
    sync_base: bool = True


@dataclass
class EndWeightUpdateReqInput:
    abort: bool = False
    expected_base_weight_checksums: Optional[Dict[str, Dict[str, str]]] = None
    expected_lora_checksums: Optional[Dict[str, Dict[str, str]]] = None


@dataclass
class WeightUpdateReqOutput:
    success: bool
    message: str


@dataclass
class PauseGenerationReqInput:
    mode: str = "abort"


@dataclass
class ContinueGenerationReqInput:
    pass
