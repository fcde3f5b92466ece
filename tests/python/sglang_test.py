"""refit.sglang against a stand-in of SGLang's update_weights_from_tensor
path (standin_sglang: engine, scheduler with its cache flush, model runner
with the custom weight loader hook) and a real refitd over the host path:
every worker joins with engine rank dp*TP + tp (dense dp=2 x tp=2, MoE
tp=2,ep=2), every engine byte of every rank is checked after every round
(refit.testing's pattern), derived tensors are refreshed and the prefix
cache flushed after each round, and the loader never raises into SGLang.

  sglang_test.py REFITD LIBREFIT_CLIENT_TESTING_SO
"""
import os
import sys
import time
import types
import unittest

REFITD, LIB = (os.path.abspath(p) for p in sys.argv[1:3])
del sys.argv[1:3]
os.environ["REFIT_CLIENT_LIB"] = LIB
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "standin_sglang"))

import refit  # noqa: E402
import refit.testing as rtest  # noqa: E402
rtest.load_library()
import refit.sglang as rs  # noqa: E402
import concurrently  # noqa: E402
import standin_torch as st  # noqa: E402
from refitd_process import Refitd  # noqa: E402
from sglang.srt.distributed import parallel_state  # noqa: E402
from sglang.srt.managers.scheduler import Engine  # noqa: E402

TIMEOUT = 60.0
TRAINER = "fsdp:dp=2"


def run_all(fns):
    concurrently.run_all(fns, timeout=TIMEOUT * 2)


def engine_model(model, convention, rank):
    want = refit.expected_buffers(side="engine", rank=rank, model=model,
                                  convention=convention)
    module, _ = st.module_from_specs(want)
    module._params.append(("model.rotary_emb.cos_sin_cache", st.Tensor([4, 4], st.float32)))
    return module


def trainer_members(server, model):
    out = []
    for r in (0, 1):
        want = refit.expected_buffers(side="trainer", rank=r, model=model,
                                      convention=TRAINER)
        _, local = st.module_from_specs(want)
        out.append(refit.Member(server=server, side="trainer", rank=r, model=model,
                                convention=TRAINER, buffers=local, timeout=TIMEOUT))
    return out


class SglangTest(unittest.TestCase):
    def setUp(self):
        self.refitd = Refitd(REFITD)
        self.addCleanup(self.refitd.stop)
        self.refreshed = []
        self.detect_error = None

        def detect(model):
            if self.detect_error:
                raise self.detect_error
            return None
        rs.layout_hooks = (detect, self.refreshed.append)
        rs.empty_tensor = lambda: None
        rs.last_errors.clear()
        self.addCleanup(setattr, rs, "layout_hooks", None)
        self.addCleanup(setattr, rs, "empty_tensor", None)
        self.addCleanup(rs._receivers.clear)

    def rounds(self, model, convention, dp, tp, staged=False):
        """Rounds into ``dp`` SGLang servers (one per replica) of ``tp``
        workers each (``staged``: workers that stage rounds)."""
        engines = [Engine([[engine_model(model, convention, d * tp + r) for r in range(tp)]],
                          custom_weight_loader=[rs.LOADER]) for d in range(dp)]
        members = trainer_members(self.refitd.address, model)
        run_all([lambda: rs.join_engine(
                    engines if len(engines) > 1 else engines[0], members[0],
                    server=self.refitd.address, engine_id="s0",
                    model=model, convention=convention, timeout=TIMEOUT, staged=staged),
                 lambda: members[1].prepare(timeout=TIMEOUT)])
        self.assertEqual(rs.last_errors, [])
        runners = [r for e in engines for s in e.schedulers for r in s.runners]
        self.assertEqual([rs.receiver(r.model).rank for r in runners],
                         list(range(len(runners))))
        for v in (1, 2):
            for m in members:
                rtest.fill_pattern(m, v)
            run_all([lambda r=r: rs.sync_weights(
                engines if r == 0 else None, members[r], engine_id="s0", version=v,
                rank=r, world=2, timeout=TIMEOUT) for r in (0, 1)])
            for r in runners:
                rtest.check_pattern(rs.receiver(r.model).member, v)
                self.assertEqual(rs.receiver(r.model).version, v)
                if staged:
                    self.assertGreater(rs.receiver(r.model).last_stats["pause_seconds"], 0)
        self.assertEqual(len(self.refreshed), 2 * len(runners))
        self.assertEqual([s.cache_flushes for e in engines for s in e.schedulers],
                         [2] * len(engines))
        for e in engines:
            e.update_weights_from_tensor(**rs.shutdown_request())
        self.assertEqual(rs._receivers, {})
        for m in members:
            m.close()

    def test_dense_dp2_tp2_rounds_reach_engine_ranks_0_to_3(self):
        self.rounds("tiny-qwen3", "sglang:tp=2,dp=2", dp=2, tp=2)

    def test_staged_tp2_rounds_apply_what_arrived(self):
        self.rounds("tiny-qwen3", "sglang:tp=2", dp=1, tp=2, staged=True)

    def test_moe_tp2_ep2_rounds(self):
        self.rounds("tiny-qwen3-moe", "sglang:tp=2,ep=2", dp=1, tp=2)

    def test_default_hooks_are_engine_layouts_detect_and_refresh(self):
        # Without layout_hooks, every worker runs refit.engine_layouts'
        # SGLang detector at registration and its derived-tensor refresh
        # (DeepSeek's w_kc / w_vc) after each round, before the commit.
        import refit.engine_layouts as el
        calls = []
        real = (el.sglang_kernel_layout, el.refresh_sglang_derived)
        self.addCleanup(setattr, el, "sglang_kernel_layout", real[0])
        self.addCleanup(setattr, el, "refresh_sglang_derived", real[1])
        el.sglang_kernel_layout = lambda m: calls.append("detect") or real[0](m)
        el.refresh_sglang_derived = lambda m: calls.append("refresh") or real[1](m)
        rs.layout_hooks = None
        engine = Engine([[engine_model("tiny-qwen3", "sglang:tp=1", 0)]],
                        custom_weight_loader=[rs.LOADER])
        members = trainer_members(self.refitd.address, "tiny-qwen3")
        run_all([lambda: rs.join_engine(engine, members[0], server=self.refitd.address,
                                        engine_id="s0", model="tiny-qwen3",
                                        convention="sglang:tp=1", timeout=TIMEOUT),
                 lambda: members[1].prepare(timeout=TIMEOUT)])
        for m in members:
            rtest.fill_pattern(m, 1)
        run_all([lambda r=r: rs.sync_weights(engine if r == 0 else None, members[r],
                                             engine_id="s0", version=1, rank=r, world=2,
                                             timeout=TIMEOUT) for r in (0, 1)])
        self.assertEqual(rs.last_errors, [])
        self.assertEqual(calls, ["detect", "refresh"])
        worker = engine.schedulers[0].runners[0].model
        self.assertIsNone(rs.receiver(worker).kernel)
        self.assertEqual(rs.receiver(worker).version, 1)
        engine.update_weights_from_tensor(**rs.shutdown_request())
        self.assertIsNone(rs.receiver(worker))
        for m in members:
            m.close()

    def test_a_worker_refusing_its_layout_fails_every_member_at_once(self):
        # Worker 1 of a TP2 engine holds a layout refit does not write: it
        # tells refitd, and the trainer's join_engine, the other trainer
        # rank and worker 0 all fail within seconds naming it and the
        # layer, not at their 60 s timeouts.
        why = "layer model.layers.0.mlp.experts: FlashInfer TRTLLM blocks"
        models = [engine_model("tiny-qwen3", "sglang:tp=2", r) for r in range(2)]

        def detect(model):
            if model is models[1]:
                raise refit.RefitError(3, why)
            return None
        rs.layout_hooks = (detect, self.refreshed.append)
        engine = Engine([models], custom_weight_loader=[rs.LOADER])
        members = trainer_members(self.refitd.address, "tiny-qwen3")
        failed = {}

        def expect_failure(rank, fn):
            try:
                fn()
            except refit.RefitError as e:
                failed[rank] = e
        start = time.monotonic()
        run_all([lambda: expect_failure(0, lambda: rs.join_engine(
                    engine, members[0], server=self.refitd.address, engine_id="s0",
                    model="tiny-qwen3", convention="sglang:tp=2", timeout=TIMEOUT)),
                 lambda: expect_failure(1, lambda: members[1].prepare(timeout=TIMEOUT))])
        self.assertLess(time.monotonic() - start, 20.0)
        self.assertEqual(sorted(failed), [0, 1])
        for e in failed.values():
            self.assertIsInstance(e, refit.FailedPreconditionError)
            self.assertIn("engine s0 rank 1 refused to join", e.message)
            self.assertIn(why, e.message)
        deadline = time.monotonic() + 10.0
        while len(rs.last_errors) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertTrue(any(why in m and "refused" not in m for m in rs.last_errors),
                        rs.last_errors)  # worker 1's own log
        self.assertTrue(any("rank 1 refused to join" in m for m in rs.last_errors),
                        rs.last_errors)  # worker 0 learned it from refitd
        for m in members:
            m.close()

    def test_loader_never_raises_into_sglang(self):
        model = engine_model("tiny-qwen3", "sglang:tp=1", 0)
        parallel_state.set_ranks(0, 1)
        rs.load(model, [("model.embed_tokens.weight", None)])
        self.assertIn("takes only refit's requests", rs.last_errors[-1])
        rs.load(model, rs.update_request(1)["named_tensors"])
        self.assertIn("refit is not initialized on this worker", rs.last_errors[-1])
        self.detect_error = refit.RefitError(3, "layer model.layers.0.mlp: FlashInfer MoE")
        rs.load(model, rs.init_request(server=self.refitd.address, engine_id="s0",
                                       model="tiny-qwen3", convention="sglang:tp=1",
                                       timeout=5.0)["named_tensors"])
        self.assertIn("FlashInfer MoE", rs.last_errors[-1])
        self.assertEqual(rs._receivers, {})

    def test_engine_rank_follows_the_convention(self):
        parallel_state.set_ranks(1, 2)
        self.assertEqual(rs.engine_rank("sglang:tp=2", None), 1)
        self.assertEqual(rs.engine_rank("sglang:tp=2,dp=2", 1), 3)
        with self.assertRaises(refit.RefitError) as e:
            rs.engine_rank("sglang:tp=2,dp=2", None)
        self.assertEqual(e.exception.code_name, "FAILED_PRECONDITION")
        self.assertIn("SGLANG_DP_RANK", str(e.exception))
        os.environ["SGLANG_DP_RANK"] = "1"
        try:
            self.assertEqual(rs.engine_rank("sglang:tp=2,dp=2", None), 3)
        finally:
            del os.environ["SGLANG_DP_RANK"]
        with self.assertRaisesRegex(refit.RefitError, "tp=4, but the sglang engine runs tp=2"):
            rs.engine_rank("sglang:tp=4", None)
        parallel_state.set_ranks(0, 2, pp_size=2)
        with self.assertRaisesRegex(refit.RefitError, "pipeline parallelism \\(pp=2\\)"):
            rs.engine_rank("sglang:tp=2", None)

    def test_trainer_names_the_workers_error_when_the_version_is_not_committed(self):
        member = types.SimpleNamespace(
            current_version=lambda engine_id: 1,
            kv_get=lambda key, timeout: f"rank 3: refit.sglang update: ({key})")
        with self.assertRaises(refit.RefitError) as e:
            rs._check_engine(member, "s0", 2)
        self.assertEqual(e.exception.code_name, "ABORTED")
        self.assertIn("engine s0: holds version 1 after the update to 2: rank 3: "
                      "refit.sglang update: (refit.sglang/s0/error/2)", str(e.exception))


if __name__ == "__main__":
    unittest.main()
