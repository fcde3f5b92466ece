"""refit.sglang against a stand-in of one SGLang generation (standin_sglang/
main: no weight-update sessions; standin_sglang/sessions: begin / end
sessions with selectors) and a real refitd over the host path: every worker
joins with engine rank dp*TP + tp, every engine byte of every rank is checked
after every round (refit.testing's pattern), the speculative draft runners
never join, a refusal by SGLang fails every trainer rank within 5 s naming
the engine and SGLang's message, the prefix cache is flushed only with the
engine paused, layers a session would rewrite are refused at registration,
and the checksums the workers report equal an independent SHA-256 of their
tensors (and pass SGLang's own end-of-session check).

  sglang_test.py REFITD LIBREFIT_CLIENT_TESTING_SO GENERATION
"""
import hashlib
import os
import sys
import time
import types
import unittest

REFITD, LIB = (os.path.abspath(p) for p in sys.argv[1:3])
GEN = sys.argv[3]
del sys.argv[1:4]
os.environ["REFIT_CLIENT_LIB"] = LIB
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "standin_sglang", GEN))

import refit  # noqa: E402
import refit.checksums as rc  # noqa: E402
import refit.testing as rtest  # noqa: E402
rtest.load_library()
import refit.sglang as rs  # noqa: E402
import refit.sglang_receiver as rr  # noqa: E402
import concurrently  # noqa: E402
from sglang.srt.distributed import parallel_state  # noqa: E402
from sglang.srt.managers.scheduler import Engine  # noqa: E402
from engine_fixtures import sglang_model as engine_model, trainer_members  # noqa: E402
from refitd_process import Refitd  # noqa: E402

TIMEOUT = 60.0
TRAINER = "fsdp:dp=2"
SESSIONS = GEN == "sessions"
CACHE_ERROR = ("Online weight updates are not supported while the HPC-Ops bf16xfp32 GEMM "
               "optimization is enabled")


def run_all(fns):
    concurrently.run_all(fns, timeout=TIMEOUT * 2)


def failures(fns):
    """Runs fns at once; {index: RefitError} of those that raised one."""
    failed = {}

    def catch(i, fn):
        try:
            fn()
        except refit.RefitError as e:
            failed[i] = e
    run_all([lambda i=i, f=f: catch(i, f) for i, f in enumerate(fns)])
    return failed


class SglangTest(unittest.TestCase):
    def setUp(self):
        self.refitd = Refitd(REFITD)
        self.addCleanup(self.refitd.stop)
        self.refreshed = []
        rs.layout_hooks = (lambda model: None, self.refreshed.append)
        rs.empty_tensor = lambda: None
        rs.last_errors.clear()
        self.addCleanup(setattr, rs, "layout_hooks", None)
        self.addCleanup(setattr, rs, "empty_tensor", None)
        self.addCleanup(rs._receivers.clear)

    def engines(self, model, convention, dp, tp, drafts=False):
        return [Engine([engine_model(model, convention, d * tp + r) for r in range(tp)],
                       custom_weight_loader=[rs.LOADER],
                       drafts=[engine_model(model, convention, d * tp + r) for r in range(tp)]
                       if drafts else None) for d in range(dp)]

    def join(self, engines, model, convention, staged=False):
        members = trainer_members(self.refitd.address, model)
        self.addCleanup(lambda: [m.close() for m in members])
        run_all([lambda: rs.join_engine(
                    engines if len(engines) > 1 else engines[0], members[0],
                    server=self.refitd.address, engine_id="s0",
                    model=model, convention=convention, timeout=TIMEOUT, staged=staged),
                 lambda: members[1].prepare(timeout=TIMEOUT)])
        self.assertEqual(rs.last_errors, [])
        return members

    def sync(self, engines, members, v, **kw):
        out = {}

        def one(r):
            got = rs.sync_weights(engines if r == 0 else None, members[r], engine_id="s0",
                                  version=v, rank=r, world=2, timeout=TIMEOUT, **kw)
            if r == 0:
                out["checksums"] = got
        run_all([lambda r=r: one(r) for r in (0, 1)])
        return out["checksums"]

    def rounds(self, model, convention, dp, tp, staged=False):
        """Rounds into ``dp`` SGLang servers (one per replica) of ``tp``
        workers each, every worker with a speculative draft model
        (``staged``: workers that stage rounds)."""
        engines = self.engines(model, convention, dp, tp, drafts=True)
        members = self.join(engines, model, convention, staged=staged)
        workers = [w for e in engines for w in e.scheduler.workers]
        self.assertEqual([rs.receiver(w.model_runner.model).rank for w in workers],
                         list(range(len(workers))))
        for v in (1, 2):
            for m in members:
                rtest.fill_pattern(m, v)
            self.sync(engines, members, v)
            for w in workers:
                r = rs.receiver(w.model_runner.model)
                rtest.check_pattern(r.member, v)
                self.assertEqual(r.version, v)
                if staged:
                    self.assertGreater(r.last_stats["pause_seconds"], 0)
            self.assertEqual([e.scheduler.weight_version for e in engines], [str(v)] * dp)
        self.assertEqual(len(self.refreshed), 2 * len(workers))
        for w in workers:  # the draft runners never joined, nor were asked
            self.assertIsNone(rs.receiver(w.draft_runner.model))
            self.assertEqual(w.draft_runner.loader_calls, 0)
            self.assertEqual(w.draft_runner.begin_calls, 0)
            # init, two rounds: each inside its own session (sessions only)
            self.assertEqual(w.model_runner.begin_calls, 3 if SESSIONS else 0)
            self.assertEqual(w.model_runner.end_calls, 3 if SESSIONS else 0)
        self.assertEqual([e.scheduler.cache_flushes for e in engines], [0] * dp)
        rs.leave_engine(engines, engine_id="s0")
        self.assertEqual(rs._receivers, {})

    def test_dense_dp2_tp2_rounds_reach_engine_ranks_0_to_3(self):
        self.rounds("tiny-qwen3", "sglang:tp=2,dp=2", dp=2, tp=2)

    def test_staged_tp2_rounds_apply_what_arrived(self):
        self.rounds("tiny-qwen3", "sglang:tp=2", dp=1, tp=2, staged=True)

    def test_moe_tp2_ep2_rounds(self):
        self.rounds("tiny-qwen3-moe", "sglang:tp=2,ep=2", dp=1, tp=2)

    def test_a_draft_runner_reached_by_a_request_still_never_joins(self):
        # The request goes out the way SGLang's own Engine API sends it
        # (main: no disable_draft_model; sessions: a session opened with
        # selector="all"), so the draft runner's loader runs too: it sees a
        # second model on its engine rank and stays out of refit.
        engine = self.engines("tiny-qwen3", "sglang:tp=2", 1, 2, drafts=True)[0]
        req = rs.init_request(server=self.refitd.address, engine_id="s0",
                              model="tiny-qwen3", convention="sglang:tp=2", timeout=TIMEOUT)
        for k in ("selector", "disable_draft_model"):
            req.pop(k, None)
        members = trainer_members(self.refitd.address, "tiny-qwen3")
        self.addCleanup(lambda: [m.close() for m in members])

        def raw_init():
            c = rs.client(engine)
            if SESSIONS:
                c.begin_weight_update(selector="all")
            out = engine.update_weights_from_tensor(**req)
            if SESSIONS:
                c.end_weight_update()
            self.assertTrue(out.success, out.message)
        run_all([raw_init] + [lambda m=m: m.prepare(timeout=TIMEOUT) for m in members])
        for w in engine.scheduler.workers:
            self.assertEqual(w.draft_runner.loader_calls, 1)
            self.assertIsNone(rs.receiver(w.draft_runner.model))
            self.assertIsNotNone(rs.receiver(w.model_runner.model))
        self.assertEqual(len(rs._receivers), 2)
        self.assertEqual(rs.last_errors, [])
        rs.leave_engine(engine, engine_id="s0")

    def test_a_refused_update_fails_every_trainer_rank_within_5s(self):
        # Replica 1 publishes a derived-weight cache: its model runners
        # refuse every update before the loader runs. Replica 0 took the
        # update; it is called off. Both trainer ranks fail in under 5 s
        # (not at their 60 s timeout), naming the engine and SGLang's reason.
        engines = self.engines("tiny-qwen3", "sglang:tp=2,dp=2", 2, 2)
        members = self.join(engines, "tiny-qwen3", "sglang:tp=2,dp=2")
        for w in engines[1].scheduler.workers:
            w.model_runner.model._derived_weight_cache_error = CACHE_ERROR
        for m in members:
            rtest.fill_pattern(m, 1)
        start = time.monotonic()
        failed = failures([lambda r=r: rs.sync_weights(
            engines if r == 0 else None, members[r], engine_id="s0", version=1, rank=r,
            world=2, timeout=TIMEOUT) for r in (0, 1)])
        self.assertLess(time.monotonic() - start, 5.0)
        self.assertEqual(sorted(failed), [0, 1])
        for e in failed.values():
            self.assertIsInstance(e, refit.FailedPreconditionError)
            self.assertIn("engine s0: SGLang refused update_weights_from_tensor: " +
                          CACHE_ERROR, e.message)
        self.assertIn("rank 1: round 1 was not started", failed[1].message)
        deadline = time.monotonic() + 10.0
        while len(rs.last_errors) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(len(rs.last_errors), 2, rs.last_errors)  # replica 0's two workers
        for msg in rs.last_errors:
            self.assertIn("the update to version 1 was called off", msg)
        for e in engines:
            self.assertFalse(e.scheduler.paused)
            if SESSIONS:
                self.assertIsNone(e.scheduler.session)
        self.assertEqual(members[0].current_version("s0"), 0)

    def test_a_refused_init_fails_every_member_at_once(self):
        engine = self.engines("tiny-qwen3", "sglang:tp=2", 1, 2)[0]
        for w in engine.scheduler.workers:
            w.model_runner.model._derived_weight_cache_error = CACHE_ERROR
        members = trainer_members(self.refitd.address, "tiny-qwen3")
        self.addCleanup(lambda: [m.close() for m in members])
        start = time.monotonic()
        failed = failures([
            lambda: rs.join_engine(engine, members[0], server=self.refitd.address,
                                   engine_id="s0", model="tiny-qwen3",
                                   convention="sglang:tp=2", timeout=TIMEOUT),
            lambda: members[1].prepare(timeout=TIMEOUT)])
        self.assertLess(time.monotonic() - start, 10.0)
        self.assertEqual(sorted(failed), [0, 1])
        for e in failed.values():
            self.assertIsInstance(e, refit.FailedPreconditionError)
            self.assertIn("engine s0 rank 0 refused to join", e.message)
            self.assertIn(CACHE_ERROR, e.message)

    def test_the_cache_flush_needs_the_engine_paused(self):
        with self.assertRaisesRegex(refit.FailedPreconditionError,
                                    "engine s0: flush_cache=True needs the engine paused"):
            rs.update_request(1, engine_id="s0", flush_cache=True)
        engine = self.engines("tiny-qwen3", "sglang:tp=1", 1, 1)[0]
        engine.scheduler.running_requests = 1  # serving: not idle
        members = self.join([engine], "tiny-qwen3", "sglang:tp=1")
        for m in members:
            rtest.fill_pattern(m, 1)
        self.sync([engine], members, 1)  # no pause, no flush
        self.assertEqual(engine.scheduler.cache_flushes, 0)
        for m in members:
            rtest.fill_pattern(m, 2)
        self.sync([engine], members, 2, pause=True)
        self.assertEqual(engine.scheduler.cache_flushes, 1)
        self.assertFalse(engine.scheduler.paused)
        rtest.check_pattern(rs.receiver(engine.scheduler.runners[0].model).member, 2)

    def refused_in_sessions(self, setup, words):
        """A layer set up by ``setup`` fails the join under sessions, naming
        it, ``words`` and the setting that avoids it; joins on main."""
        engine = self.engines("tiny-qwen3", "sglang:tp=1", 1, 1)[0]
        setup(engine.scheduler.runners[0].model.child("model.layers.0.self_attn.qkv_proj"))
        members = trainer_members(self.refitd.address, "tiny-qwen3")
        self.addCleanup(lambda: [m.close() for m in members])
        failed = failures([
            lambda: rs.join_engine(engine, members[0], server=self.refitd.address,
                                   engine_id="s0", model="tiny-qwen3",
                                   convention="sglang:tp=1", timeout=TIMEOUT),
            lambda: members[1].prepare(timeout=TIMEOUT)])
        if not SESSIONS:  # no sessions: nothing rewrites what refit writes
            self.assertEqual(failed, {})
            rs.leave_engine(engine, engine_id="s0")
            return
        self.assertEqual(sorted(failed), [0, 1])
        for e in failed.values():
            self.assertIsInstance(e, refit.FailedPreconditionError)
            self.assertIn("layer model.layers.0.self_attn.qkv_proj: " + words, e.message)
            self.assertIn("--quantization", e.message)

    def test_a_layer_end_would_rederive_is_refused_under_sessions(self):
        class Fp8Method:
            def restore_weights_before_loading(self, layer):
                pass

            def process_weights_after_loading(self, layer):
                pass
        self.refused_in_sessions(lambda layer: setattr(layer, "quant_method", Fp8Method()),
                                 "Fp8Method re-derives weight at end_weight_update")

    def test_a_layer_begin_would_resize_is_refused_under_sessions(self):
        self.refused_in_sessions(
            lambda layer: object.__setattr__(layer, "_original_shapes", {"weight": (1, 1)}),
            "SGLang's begin_weight_update resizes weight back to its checkpoint shape")

    def test_checksums_match_an_independent_sha256_of_the_engine_tensors(self):
        engines = self.engines("tiny-qwen3", "sglang:tp=2", 1, 2)
        members = self.join(engines, "tiny-qwen3", "sglang:tp=2")
        for m in members:
            rtest.fill_pattern(m, 1)
        got = self.sync(engines, members, 1, checksums=True)
        runners = engines[0].scheduler.runners
        self.assertEqual(sorted(got), [0, 1])
        for k, r in enumerate(runners):
            moved = {n for n in rs.receiver(r.model).member.buffers}
            independent = {n: hashlib.sha256(p.raw()).hexdigest()
                           for n, p in r.model.named_parameters() if n in moved}
            self.assertEqual(got[k], independent)
            self.assertEqual(len(independent), len(moved))
        form = rc.sglang_form(got, "sglang:tp=2")
        self.assertEqual(form, [{"0": got[0], "1": got[1]}])
        if not SESSIONS:
            with self.assertRaisesRegex(refit.InvalidArgumentError, "session line"):
                rs.sync_weights(engines, members[0], engine_id="s0", version=2, rank=0,
                                world=2, expected_checksums=form)
            return
        # The same bytes again: SGLang's end_weight_update verifies refit's
        # expected checksums and commits; one wrong digest and it refuses.
        self.sync(engines, members, 2, expected_checksums=form)
        self.assertEqual(engines[0].scheduler.weight_version, "2")
        name = sorted(got[1])[0]
        bad = [{"0": got[0], "1": dict(got[1], **{name: "0" * 64})}]
        failed = failures([lambda r=r: rs.sync_weights(
            engines if r == 0 else None, members[r], engine_id="s0", version=3, rank=r,
            world=2, timeout=TIMEOUT, expected_checksums=bad) for r in (0, 1)])
        self.assertEqual(sorted(failed), [0])
        self.assertIn(f"SGLang refused end_weight_update: checksum mismatch for "
                      f"{name!r} on tp rank 1", failed[0].message)
        self.assertEqual(engines[0].scheduler.weight_version, "2")

    def test_external_receiver_factory(self):
        model = engine_model("tiny-qwen3", "sglang:tp=1", 0)
        with self.assertRaisesRegex(refit.InvalidArgumentError, "init_payload lacks server"):
            rr.make_receiver(types.SimpleNamespace(model=model, tp_rank=0, tp_size=1,
                                                   init_payload={}))
        members = trainer_members(self.refitd.address, "tiny-qwen3")
        self.addCleanup(lambda: [m.close() for m in members])
        context = types.SimpleNamespace(
            model=model, device="cpu", tp_rank=0, tp_size=1, group_name="g",
            master_address="", master_port=0, world_size=1, rank_offset=0,
            init_payload={"server": self.refitd.address, "engine_id": "s0",
                          "model": "tiny-qwen3", "convention": "sglang:tp=1",
                          "timeout": TIMEOUT})
        got = {}
        run_all([lambda: got.setdefault("r", rr.make_receiver(context))] +
                [lambda m=m: m.prepare(timeout=TIMEOUT) for m in members])
        receiver = got["r"]
        for m in members:
            rtest.fill_pattern(m, 1)
        run_all([lambda: receiver.receive({"version": 1, "timeout": TIMEOUT})] +
                [lambda r=r: refit.torch.publish(members[r], version=1, rank=r, world=2,
                                                 timeout=TIMEOUT) for r in (0, 1)])
        rtest.check_pattern(receiver.receiver.member, 1)
        receiver.destroy()
        receiver.destroy()
        with self.assertRaisesRegex(refit.FailedPreconditionError, "destroyed"):
            receiver.receive(None)

    def test_loader_never_raises_into_sglang(self):
        model = engine_model("tiny-qwen3", "sglang:tp=1", 0)
        parallel_state.set_ranks(0, 1)
        rs.load(model, [("model.embed_tokens.weight", None)])
        self.assertIn("takes only refit's requests", rs.last_errors[-1])
        rs.load(model, rs.update_request(1, engine_id="s0")["named_tensors"])
        self.assertIn("refit is not initialized on this worker", rs.last_errors[-1])

        def detect(m):
            raise refit.RefitError(3, "layer model.layers.0.mlp: FlashInfer MoE")
        rs.layout_hooks = (detect, self.refreshed.append)
        rs.load(model, rs.init_request(server=self.refitd.address, engine_id="s0",
                                       model="tiny-qwen3", convention="sglang:tp=1",
                                       timeout=5.0)["named_tensors"])
        self.assertIn("FlashInfer MoE", rs.last_errors[-1])
        self.assertEqual(rs._receivers, {})

    def test_requests_carry_the_generations_target_selector_and_the_version(self):
        req = rs.update_request(7, engine_id="s0")
        self.assertEqual(req["weight_version"], "7")
        self.assertFalse(req["flush_cache"])
        if SESSIONS:
            self.assertEqual(req["selector"], "target")
            self.assertNotIn("disable_draft_model", req)
        else:
            self.assertIs(req["disable_draft_model"], True)
            self.assertNotIn("selector", req)
        self.assertEqual(rs.SGLANG_INTERFACE, GEN)
        # Through sglang.Engine, a field this generation lacks is refused,
        # not dropped (the update would reach the draft runners).
        c = rs.client(self.engines("tiny-qwen3", "sglang:tp=1", 1, 1)[0])
        other = {"disable_draft_model": True} if SESSIONS else {"selector": "target"}
        with self.assertRaisesRegex(refit.FailedPreconditionError,
                                    f"UpdateWeightsFromTensorReqInput has no {list(other)[0]}"):
            c.update_weights_from_tensor([], rs.LOADER, False, **other)
        if not SESSIONS:
            with self.assertRaisesRegex(refit.FailedPreconditionError,
                                        "this SGLang has no BeginWeightUpdateReqInput"):
                c.begin_weight_update()

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
