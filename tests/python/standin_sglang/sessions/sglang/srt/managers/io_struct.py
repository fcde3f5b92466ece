"""The request objects of SGLang's session line (io_struct): begin / end of
a weight-update session, a selector instead of disable_draft_model, and the
base-weight checksums end verifies. The answers and the pause requests are
the same in both generations (standin_sglang_runtime)."""
from dataclasses import dataclass
from typing import Dict, Optional

from standin_sglang_runtime import (  # noqa: F401
    ContinueGenerationReqInput, PauseGenerationReqInput, UpdateWeightsFromTensorFields,
    UpdateWeightsFromTensorReqOutput)


@dataclass
class UpdateWeightsFromTensorReqInput(UpdateWeightsFromTensorFields):
    selector: str = "all"


@dataclass
class BeginWeightUpdateReqInput:
    selector: str = "all"
    sync_base: bool = True


@dataclass
class EndWeightUpdateReqInput:
    abort: bool = False
    expected_base_weight_checksums: Optional[Dict[str, Dict[str, str]]] = None
    expected_lora_checksums: Optional[Dict[str, Dict[str, str]]] = None
