"""The trainer side of rl_loop_gpu.py: the transformers (or stand-in) Qwen3
model it trains, its float32 same-weights copy loaded with an engine's
(dequantized) weights, its logits and one AdamW step. Imported by
rl_loop_gpu.py from the same folder."""
import copy

TRAIN_SHAPE = (4, 32)


def build_trainer(kind, device, reference, experts=""):
    """The trainer's model in BF16 on ``device`` (seeded) and its config
    dict (what refit and the engine read): transformers'
    Qwen3ForCausalLM / Qwen3MoeForCausalLM built from fused_qwen3.CONFIGS,
    or the stand-in. ``experts``: transformers' experts implementation
    ("": its default)."""
    import torch
    import fused_qwen3 as fq
    cfg = dict(fq.CONFIGS[kind])
    torch.manual_seed(0)
    if reference == "stand-in":
        return fq.StandInQwen3(cfg).to(device=device, dtype=torch.bfloat16), cfg
    import transformers
    fields = {k: v for k, v in cfg.items() if k not in ("model_type", "rope_theta")}
    hf_cfg = (transformers.Qwen3Config if kind == "qwen3" else transformers.Qwen3MoeConfig)(**fields)
    # Built in BF16 the way from_pretrained(dtype=bfloat16) builds it: the
    # parameters in BF16, the rotary inv_freq buffer in float32.
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = (transformers.Qwen3ForCausalLM if kind == "qwen3"
                 else transformers.Qwen3MoeForCausalLM)(hf_cfg)
    finally:
        torch.set_default_dtype(default)
    model = model.to(device=device)  # a dtype here would cast inv_freq too
    wrong = [n for n, p in model.named_parameters() if p.dtype != torch.bfloat16]
    if wrong:
        raise RuntimeError(f"parameters built in another dtype than bf16: {wrong[:3]}")
    if experts and hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(experts)
    for key, want in fields.items():
        got = getattr(model.config, key, None)
        if got != want:
            raise RuntimeError(f"transformers' {type(hf_cfg).__name__} has {key}={got!r}, "
                               f"the test's config {want!r}")
    params = getattr(model.config, "rope_parameters", None) or {}
    cfg["rope_theta"] = float(params.get("rope_theta", getattr(model.config, "rope_theta", 0)))
    check_rotary(model, cfg)
    return model, cfg


def check_rotary(model, cfg):
    """Raises RuntimeError unless every rotary inv_freq buffer of the model
    is float32 and equals 1 / theta^(2i/head_dim) for the config's theta
    (the engine's rotary embedding), or when the model has none."""
    import torch
    hd = cfg["head_dim"]
    want = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
    found = 0
    for name, buf in model.named_buffers():
        if not name.endswith("inv_freq"):
            continue
        found += 1
        if buf.dtype != torch.float32 or not torch.allclose(buf.cpu(), want, rtol=1e-6, atol=0):
            raise RuntimeError(f"{name}: {buf.dtype}, {buf.flatten()[:3].tolist()}..., the "
                               f"engine's rotary uses theta {cfg['rope_theta']:g}: "
                               f"{want[:3].tolist()}...")
    if not found:
        raise RuntimeError("the model has no rotary inv_freq buffer to check theta against")


def float32_copy(model):
    """A float32 copy of the model for the same-weights reference, with
    transformers' eager experts (its grouped_mm is for bf16)."""
    m = copy.deepcopy(model).float()
    if hasattr(m, "set_experts_implementation"):
        m.set_experts_implementation("eager")
    return m.eval()


def load_engine_weights(model, engine, shapes, tied, kernel=None):
    """Writes the engine's weights (dequantized, unfused) into ``model``'s
    parameters (per-expert views of stacked experts). Raises RuntimeError
    naming a parameter the engine does not hold."""
    import torch
    import fused_qwen3 as fq
    values = fq.unfused_weights(engine, shapes, kernel)
    with torch.no_grad():
        for name, p in fq.ExpertViews(model).named_parameters(remove_duplicate=False):
            if name in values:
                p.copy_(values[name])
            elif not (tied and name == "lm_head.weight"):
                raise RuntimeError(f"the engine holds no value for parameter {name}")


def logits(model, tokens):
    """float32 logits of the model's own forward (eval mode, no grad)."""
    import torch
    was = model.training
    model.eval()
    with torch.no_grad():
        out = model(input_ids=tokens).logits.float()
    model.train(was)
    return out


def train_step(model, opt, gen, vocab, device):
    """One AdamW step on random tokens (next-token loss); returns the loss."""
    import torch
    ids = torch.randint(0, vocab, TRAIN_SHAPE, generator=gen).to(device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss)

