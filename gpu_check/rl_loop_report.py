"""The table rl_loop_gpu.py prints last: one line per row (backend, model,
engine, mode, steps, logit differences and their tolerances, the result,
refit's milliseconds per step, how the engine joined and what was checked),
and what each column means."""


def print_table(rows):
    print("\n== RL loop: trainer (transformers, BF16, AdamW) -> refit -> engine "
          "(vLLM's / SGLang's fused layout)")
    print(f"{'backend':<7} {'model':<10} {'engine':<14} {'mode':<8} {'steps':>5} "
          f"{'max|dlogit|':>12} {'tol':>9} {'tokens':>6} {'same-w':>9} {'tol':>9} "
          f"{'result':<7} {'refit ms/step':>13}  detail")
    for r in rows:
        ms = sum(r["ms"]) / len(r["ms"]) if r["ms"] else 0.0
        rms = sum(r["round_ms"]) / len(r["round_ms"]) if r["round_ms"] else 0.0
        result = "REFUSED" if r.get("refused") else "PASS" if r["ok"] else "FAIL"
        print(f"{r.get('backend', 'vllm'):<7} {r['model']:<10} {r['engine']:<14} "
              f"{r['mode']:<8} {r['steps']:>5} "
              f"{r['diff']:>12.4g} {r['tol']:>9.3g} {r['within']:>6.0%} {r['same']:>9.3g} "
              f"{r['same_tol']:>9.3g} "
              f"{result:<7} {ms:>7.1f} ({rms:.1f})  "
              f"{r['path']}; {r['detail']}")
    print("(max|dlogit|: engine logits computed in BF16 vs transformers' forward of the "
          "trainer's model, worst step; tokens: the share within tol; same-w: float32 "
          "forwards over the same weights; refit ms: publish() wall time (sglang: "
          "sync_weights(), which waits for the engine's answer: here after it computed "
          "the step's logits and copies), in brackets the round's own; REFUSED: refit refused the "
          "engine at registration, naming the layer, as it must for that setup)")
