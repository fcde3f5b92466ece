"""The request objects of SGLang main's weight updates (io_struct): no
session requests; an update may keep off the draft model
(disable_draft_model) and stamp a weight_version. The answers and the pause
requests are the same in both generations (standin_sglang_runtime)."""
from dataclasses import dataclass
from typing import Optional

from standin_sglang_runtime import (  # noqa: F401
    ContinueGenerationReqInput, PauseGenerationReqInput, UpdateWeightsFromTensorFields,
    UpdateWeightsFromTensorReqOutput)


@dataclass
class UpdateWeightsFromTensorReqInput(UpdateWeightsFromTensorFields):
    disable_draft_model: Optional[bool] = None
