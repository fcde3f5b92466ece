"""Stand-in of ModelRunner.update_weights_from_tensor (SGLang, see
sglang/__init__.py): named tensors are unwrapped for this TP rank; then
load_format "direct" copies them into the parameters, a load_format listed
in server_args.custom_weight_loader is imported by dotted path and called as
loader(model, named_tensors), None goes to model.load_weights, anything else
raises NotImplementedError. The loader's return value is ignored and the
call reports (True, "Success")."""
import importlib

from sglang.srt.distributed import parallel_state


def dynamic_import(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


class ModelRunner:
    def __init__(self, model, server_args, tp_rank: int, tp_size: int, pp_size: int = 1):
        self.model, self.server_args = model, server_args
        self.tp_rank, self.tp_size, self.pp_size = tp_rank, tp_size, pp_size

    def update_weights_from_tensor(self, named_tensors, load_format=None):
        parallel_state.set_ranks(self.tp_rank, self.tp_size, self.pp_size)
        named_tensors = [(n, t[self.tp_rank] if isinstance(t, list) else t)
                         for n, t in named_tensors]
        if load_format == "direct":
            params = dict(self.model.named_parameters())
            for n, t in named_tensors:
                params[n].copy_(t)
        elif load_format in self.server_args.custom_weight_loader:
            dynamic_import(load_format)(self.model, named_tensors)
        elif load_format is None:
            self.model.load_weights(named_tensors)
        else:
            raise NotImplementedError(f"Unknown load_format={load_format}")
        return True, "Success"
