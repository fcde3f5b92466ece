"""What the engine integration tests (vllm_generations_test, sglang_test,
engine_convention_test) build their members from: stand-in models of
engine workers holding an engine rank's parameters, and the two trainer
ranks of an FSDP2 job, through refit's own buffer lists."""
import refit
import standin_torch as st

TRAINER = "fsdp:dp=2"
TIMEOUT = 60.0


def vllm_model(model, convention, rank):
    """A vLLM worker's model: engine rank ``rank``'s parameters as flat
    stand-in modules, and a rotary cache refit does not move."""
    want = refit.expected_buffers(side="engine", rank=rank, model=model,
                                  convention=convention)
    module, _ = st.module_from_specs(want)
    module._params.append(("model.rotary_emb.cos_sin_cache", st.Tensor([4, 4], st.float32)))
    return module


def sglang_model(model, convention, rank):
    """An SGLang worker's model: a module tree holding the engine rank's
    parameters (distinct bytes) and a rotary cache refit does not move."""
    root = st.Layer()
    want = refit.expected_buffers(side="engine", rank=rank, model=model,
                                  convention=convention)
    for i, s in enumerate(want):
        path, _, leaf = s.name.rpartition(".")
        t = st.Tensor(s.shape, st.bfloat16 if s.dtype == "bf16" else st.float32)
        t.fill_bytes(i + 1)
        setattr(root.child(path), leaf, t)
    root.child("model.rotary_emb").cos_sin_cache = st.Tensor([4, 4], st.float32)
    return root


def trainer_source(model, rank):
    """refit.vllm's RefitSource over trainer rank ``rank``'s module of
    Shard(0) DTensor stand-ins under a wrapper prefix."""
    import refit.vllm as rv
    want = refit.expected_buffers(side="trainer", rank=rank, model=model,
                                  convention=TRAINER)
    module, _ = st.module_from_specs(want, wrap=lambda n: "module." + n, dtensor_world=2)
    return rv.RefitSource(module, rank=rank, model=model, convention=TRAINER)


def trainer_members(server, model):
    """Both trainer ranks' refit.Members (not yet prepared)."""
    out = []
    for r in (0, 1):
        want = refit.expected_buffers(side="trainer", rank=r, model=model,
                                      convention=TRAINER)
        _, local = st.module_from_specs(want)
        out.append(refit.Member(server=server, side="trainer", rank=r, model=model,
                                convention=TRAINER, buffers=local, timeout=TIMEOUT))
    return out
