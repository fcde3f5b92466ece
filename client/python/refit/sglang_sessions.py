"""What SGLang's weight-update sessions do to a worker's model, and the
layers refit refuses to register under them.

Read in sgl-project/sglang, 2026-12-06, model_executor/
model_runner_components/weight_updater.py at
027814efb69e3220bcae1c2dfd6a0ccc1aff2821:

* ``begin_weight_update`` runs ``DefaultModelLoader.
  restore_weights_before_loading`` over the model: each quant method's
  ``restore_weights_before_loading(layer)``. The Marlin methods (GPTQ /
  compressed-tensors MoE under layers/quantization/) ``resize_`` every
  parameter listed in ``layer._original_shapes`` back to its checkpoint
  shape: new storage, so the memory refit registered is no longer the
  layer's. Other methods put checkpoint-form state back (FP8 / MXFP4
  checkpoint scales, KV-cache scales) for the load.
* ``end_weight_update`` runs ``DefaultModelLoader.postprocess_weights``: each
  quant method's ``process_weights_after_loading(layer)`` over the whole
  model, deriving the kernel form again from what the layer then holds.

refit writes a layer's weights in place in the layout its kernels read. A
layer that begin resizes, or whose quant method re-derives its weights at
end (it defines ``restore_weights_before_loading``: the pair that brackets
a reload), would be written by refit and then rewritten by end; refit
refuses it at registration, naming it and the setting that avoids it.
Unquantized layers (BF16, refit's checkpoint and FlashInfer CUTLASS
layouts) define neither hook and pass; layers that hold no weight refit
moves (attention's KV-cache scales) are not checked.
"""

from typing import Any, Iterator, Tuple

import refit

__all__ = ["check_session_layers"]

# The parameters refit moves into an SGLang layer (refit's sglang convention).
_MOVED = ("weight", "w13_weight", "w2_weight", "weight_scale_inv",
          "w13_weight_scale_inv", "w2_weight_scale_inv")
_AVOID = ("serve a BF16 checkpoint (no --quantization) with --moe-runner-backend triton, "
          "or run an SGLang without weight-update sessions")


def _modules(model: Any) -> Iterator[Tuple[str, Any]]:
    if hasattr(model, "named_modules"):
        yield from model.named_modules()
    else:
        yield "", model


def _resized(layer: Any) -> str:
    """The first parameter a session resizes (begin back to the checkpoint
    shape, end to the repacked one), or ''. Inside a session the shapes may
    be the checkpoint's already: the record itself marks the layer."""
    for name in (getattr(layer, "_original_shapes", None) or {}):
        if getattr(layer, name, None) is not None:
            return name
    return ""


def check_session_layers(model: Any) -> None:
    """Raises RefitError INVALID_ARGUMENT naming the first layer of
    ``model`` that a weight-update session would move (begin resizes it)
    or re-derive (end re-runs its quant method's
    process_weights_after_loading over weights refit writes), with the
    setting that avoids it. Returns for a model refit can update inside
    sessions."""
    for name, layer in _modules(model):
        param = _resized(layer)
        if param:
            raise refit.InvalidArgumentError(
                f"layer {name}: SGLang's begin_weight_update resizes {param} back to its "
                f"checkpoint shape and end_weight_update repacks it (the quant method's "
                f"restore_weights_before_loading, Marlin): its storage changes under "
                f"refit's registered memory; "
                f"{_AVOID}")
        qm = getattr(layer, "quant_method", None)
        if qm is None or not callable(getattr(qm, "restore_weights_before_loading", None)):
            continue
        moved = [p for p in _MOVED if getattr(layer, p, None) is not None]
        if moved:
            raise refit.InvalidArgumentError(
                f"layer {name}: {type(qm).__name__} re-derives {', '.join(moved)} at "
                f"end_weight_update (process_weights_after_loading after "
                f"restore_weights_before_loading), over what refit writes in place; "
                f"{_AVOID}")
