"""The engine convention read from the engine's own configuration
(refit.engine_convention), against stand-ins of vLLM main
(standin_vllm/current) and SGLang main (standin_sglang/main) and a real
refitd: the user writes no convention string; vLLM workers of an MoE engine
with expert parallelism derive vllm:tp=2,dp=2,ep=4 and every engine byte
arrives; SGLang workers derive sglang:tp=2,dp=2,ep=2 from their server args
and the replicas join_engine is given, and SGLang's external receiver
sglang:tp=1; dense vLLM replicas without the replica count, and one SGLang
server running two replicas, refuse to join, and the trainer fails at once
naming them; an explicit convention stays an override, checked against the
engine, and a dp given beside it must agree.

  engine_convention_test.py REFITD LIBREFIT_CLIENT_TESTING_SO
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
sys.path.insert(0, os.path.join(HERE, "standin_vllm", "current"))
sys.path.insert(0, os.path.join(HERE, "standin_sglang", "main"))

import refit  # noqa: E402
import refit.engine_convention as ec  # noqa: E402
import refit.testing as rtest  # noqa: E402
rtest.load_library()
import refit.sglang as rs  # noqa: E402
import refit.sglang_receiver as rr  # noqa: E402
import refit.torch  # noqa: E402
import refit.vllm as rv  # noqa: E402
from concurrently import run_all  # noqa: E402
from engine_fixtures import (sglang_model, trainer_members, trainer_source,  # noqa: E402
                             vllm_model as engine_model)
from refitd_process import Refitd  # noqa: E402
from sglang.srt.managers.scheduler import Engine  # noqa: E402
from vllm.distributed.weight_transfer import factory  # noqa: E402
from vllm.v1.worker.gpu_worker import LLM, Worker  # noqa: E402

TIMEOUT = 60.0
TRAINER = "fsdp:dp=2"
MOE = "tiny-qwen3-moe"


def parallel_config(replica, tp_rank, *, moe, ep=False, **extra):
    """vLLM's ParallelConfig in worker ``tp_rank`` of DP replica
    ``replica`` of 2, TP 2 (vllm/config/parallel.py at 00193b82): a dense
    model's replicas run as independent engines (data_parallel_size 1,
    data_parallel_rank 0; data_parallel_index keeps the replica)."""
    pc = types.SimpleNamespace(rank=tp_rank, world_size=2, tensor_parallel_size=2,
                               pipeline_parallel_size=1, prefill_context_parallel_size=1,
                               data_parallel_size=2 if moe else 1,
                               data_parallel_rank=replica if moe else 0,
                               data_parallel_index=replica, enable_expert_parallel=ep,
                               expert_placement_strategy="linear", enable_eplb=False)
    for k, v in extra.items():
        setattr(pc, k, v)
    return pc


class DerivationTest(unittest.TestCase):
    def test_vllm_sizes_come_from_the_parallel_config(self):
        self.assertEqual(ec.vllm_convention(parallel_config(0, 1, moe=False)), "vllm:tp=2")
        self.assertEqual(ec.vllm_convention(parallel_config(1, 0, moe=False), dp=2),
                         "vllm:tp=2,dp=2")
        self.assertEqual(ec.vllm_convention(parallel_config(1, 0, moe=True, ep=True)),
                         "vllm:tp=2,dp=2,ep=4")
        self.assertEqual(ec.vllm_convention(parallel_config(
            0, 0, moe=True, ep=True, expert_placement_strategy="round_robin")),
            "vllm:tp=2,dp=2,ep=4,placement=round_robin")
        # Expert parallelism means nothing for a model without experts.
        self.assertEqual(ec.vllm_convention(parallel_config(0, 0, moe=False, ep=True),
                                            types.SimpleNamespace(is_moe=False)),
                         "vllm:tp=2")

    def test_vllm_what_a_worker_cannot_tell_or_refit_cannot_follow_is_named(self):
        for pc, dp, text in (
                (parallel_config(1, 0, moe=False), None,
                 "DP replica 1 \\(data_parallel_index\\).*give dp"),
                (parallel_config(0, 0, moe=True), 4,
                 "dp=4 was given, but the vLLM engine runs data_parallel_size=2"),
                (parallel_config(0, 0, moe=True, ep=True, enable_eplb=True), None,
                 "enable_eplb"),
                (parallel_config(0, 0, moe=False, pipeline_parallel_size=2), None,
                 "pipeline parallelism \\(pipeline_parallel_size=2\\)")):
            with self.assertRaisesRegex(refit.InvalidArgumentError, text):
                ec.vllm_convention(pc, dp=dp)

    def test_a_dp_given_beside_a_convention_must_agree(self):
        self.assertEqual(ec.given_or_derived("vllm:tp=2,dp=2", 2, None), "vllm:tp=2,dp=2")
        self.assertEqual(ec.given_or_derived(None, 2, lambda: "derived"), "derived")
        with self.assertRaisesRegex(refit.InvalidArgumentError,
                                    "dp=3 was given beside convention vllm:tp=2, which has "
                                    "dp=1"):
            ec.given_or_derived("vllm:tp=2", 3, None)

    def test_sglang_sizes_come_from_the_server_args(self):
        args = types.SimpleNamespace(tp_size=2, dp_size=1, ep_size=2, enable_dp_attention=False)
        self.assertEqual(ec.sglang_convention(args, tp_size=2), "sglang:tp=2,ep=2")
        self.assertEqual(ec.sglang_convention(args, tp_size=2, dp=3), "sglang:tp=2,dp=3,ep=2")
        for change, text in (({"enable_dp_attention": True}, "DP attention"),
                             ({"dp_size": 2}, "--dp-size 2: .*one server per replica")):
            with self.assertRaisesRegex(refit.InvalidArgumentError, text):
                ec.sglang_convention(types.SimpleNamespace(**dict(vars(args), **change)),
                                     tp_size=2)

    def test_sglang_fp8_layers_give_quant_fp8(self):
        class Fp8LinearMethod:
            pass
        layer = types.SimpleNamespace(quant_method=Fp8LinearMethod(),
                                      weight=types.SimpleNamespace(dtype="torch.float8_e4m3fn"))
        model = types.SimpleNamespace(named_modules=lambda: [("model.layers.0.mlp", layer)])
        self.assertEqual(ec.sglang_quant_format(model), "fp8")
        layer.weight = types.SimpleNamespace(dtype="torch.bfloat16")
        self.assertIsNone(ec.sglang_quant_format(model))


class EndToEndTest(unittest.TestCase):
    def setUp(self):
        self.refitd = Refitd(REFITD)
        self.addCleanup(self.refitd.stop)
        rv.register()
        rv.layout_hooks = (lambda model: None, lambda model: None)
        self.addCleanup(setattr, rv, "layout_hooks", None)
        rs.layout_hooks = (lambda model: None, lambda model: None)
        rs.empty_tensor = lambda: None
        rs.last_errors.clear()
        self.addCleanup(setattr, rs, "layout_hooks", None)
        self.addCleanup(setattr, rs, "empty_tensor", None)
        self.addCleanup(rs._receivers.clear)

    def vllm_trainers(self, llm, model, **engine):
        info = [rv.RefitTrainerInitInfo(rank=r, server=self.refitd.address, world=2,
                                        model=model, convention=TRAINER, engine_id="e0",
                                        timeout=TIMEOUT, **engine) for r in (0, 1)]
        engines = [None, None]

        def init(r):
            engines[r] = factory.WeightTransferTrainerFactory.trainer_init(
                init_info=info[r], client=llm if r == 0 else None,
                source=trainer_source(model, r))
        run_all([lambda r=r: init(r) for r in (0, 1)])
        return engines

    def test_vllm_moe_workers_join_without_a_convention(self):
        conv = "vllm:tp=2,dp=2,ep=4"
        workers = [Worker(backend="refit", parallel_config=parallel_config(d, t, moe=True,
                                                                           ep=True),
                          model=engine_model(MOE, conv, d * 2 + t), moe=True)
                   for d in (0, 1) for t in (0, 1)]
        engines = self.vllm_trainers(LLM(workers), MOE)
        receivers = [w.weight_transfer_engine.receiver for w in workers]
        self.assertEqual([r.convention for r in receivers], [conv] * 4)
        self.assertEqual([r.rank for r in receivers], [0, 1, 2, 3])
        for e in engines:
            rtest.fill_pattern(e.member, 1)
        run_all([e.send_weights for e in engines])
        for r in receivers:
            rtest.check_pattern(r.member, 1)
        for e in engines:
            e.shutdown()
        for w in workers:
            w.shutdown()

    def test_vllm_dense_replicas_without_their_count_fail_the_trainer_at_once(self):
        # vLLM runs dense replicas as independent engines: replica 1's
        # workers cannot tell the engine has two replicas, refuse to join,
        # and every trainer rank fails within seconds naming them.
        workers = [Worker(backend="refit", parallel_config=parallel_config(d, t, moe=False),
                          model=engine_model("tiny-qwen3", "vllm:tp=2,dp=2", d * 2 + t))
                   for d in (0, 1) for t in (0, 1)]
        start = time.monotonic()
        with self.assertRaisesRegex(refit.RefitError, "give dp"):
            self.vllm_trainers(LLM(workers), "tiny-qwen3")
        self.assertLess(time.monotonic() - start, 10.0)
        for w in workers:
            w.shutdown()

    def test_vllm_an_explicit_convention_is_still_checked(self):
        worker = Worker(backend="refit", parallel_config=parallel_config(0, 0, moe=False),
                        model=engine_model("tiny-qwen3", "vllm:tp=2", 0))
        with self.assertRaisesRegex(refit.InvalidArgumentError,
                                    "tp=4, but the vllm engine runs tp=2"):
            worker.init_weight_transfer_engine({
                "server": self.refitd.address, "engine_id": "e0", "model": "tiny-qwen3",
                "convention": "vllm:tp=4", "timeout": 5.0})

    def test_sglang_workers_read_tp_and_ep_from_sglang_and_dp_from_the_engines(self):
        conv = "sglang:tp=2,dp=2,ep=2"
        engines = [Engine([sglang_model(MOE, conv, d * 2 + t) for t in (0, 1)],
                          custom_weight_loader=[rs.LOADER], ep_size=2) for d in (0, 1)]
        members = trainer_members(self.refitd.address, MOE)
        self.addCleanup(lambda: [m.close() for m in members])
        run_all([lambda: rs.join_engine(engines, members[0], server=self.refitd.address,
                                        engine_id="s0", model=MOE, timeout=TIMEOUT),
                 lambda: members[1].prepare(timeout=TIMEOUT)])
        self.assertEqual(rs.last_errors, [])
        receivers = [rs.receiver(w.model_runner.model) for e in engines
                     for w in e.scheduler.workers]
        self.assertEqual([r.convention for r in receivers], [conv] * 4)
        self.assertEqual([r.rank for r in receivers], [0, 1, 2, 3])
        for m in members:
            rtest.fill_pattern(m, 1)
        run_all([lambda r=r: rs.sync_weights(engines if r == 0 else None, members[r],
                                             engine_id="s0", version=1, rank=r, world=2,
                                             timeout=TIMEOUT) for r in (0, 1)])
        for r in receivers:
            rtest.check_pattern(r.member, 1)
        rs.leave_engine(engines, engine_id="s0")

    def test_sglang_one_server_of_two_replicas_fails_the_trainer_at_once(self):
        # One server with --dp-size 2: its workers cannot tell their
        # replica, refuse to join naming the flag, and the trainer ranks
        # fail within seconds instead of at their timeout.
        engine = Engine([sglang_model("tiny-qwen3", "sglang:tp=2", t) for t in (0, 1)],
                        custom_weight_loader=[rs.LOADER], dp_size=2)
        members = trainer_members(self.refitd.address, "tiny-qwen3")
        self.addCleanup(lambda: [m.close() for m in members])
        start = time.monotonic()
        with self.assertRaisesRegex(refit.FailedPreconditionError,
                                    "refused to join.*--dp-size 2"):
            run_all([lambda: rs.join_engine(engine, members[0], server=self.refitd.address,
                                            engine_id="s0", model="tiny-qwen3",
                                            timeout=TIMEOUT),
                     lambda: members[1].prepare(timeout=TIMEOUT)])
        self.assertLess(time.monotonic() - start, 10.0)
        self.assertTrue(any("--dp-size 2" in e for e in rs.last_errors), rs.last_errors)

    def test_sglang_external_receiver_reads_its_convention_too(self):
        # SGLang's external receiver factory gets the worker's TP size; the
        # server args (here the test's) give the rest.
        rs.server_args = lambda: types.SimpleNamespace(tp_size=1, dp_size=1, ep_size=1,
                                                       enable_dp_attention=False)
        self.addCleanup(setattr, rs, "server_args", None)
        members = trainer_members(self.refitd.address, "tiny-qwen3")
        self.addCleanup(lambda: [m.close() for m in members])
        context = types.SimpleNamespace(
            model=sglang_model("tiny-qwen3", "sglang:tp=1", 0), device="cpu", tp_rank=0,
            tp_size=1, init_payload={"server": self.refitd.address, "engine_id": "s0",
                                     "model": "tiny-qwen3", "timeout": TIMEOUT})
        got = {}
        run_all([lambda: got.setdefault("r", rr.make_receiver(context))] +
                [lambda m=m: m.prepare(timeout=TIMEOUT) for m in members])
        receiver = got["r"]
        self.assertEqual(receiver.receiver.convention, "sglang:tp=1")
        for m in members:
            rtest.fill_pattern(m, 1)
        run_all([lambda: receiver.receive({"version": 1, "timeout": TIMEOUT})] +
                [lambda r=r: refit.torch.publish(members[r], version=1, rank=r, world=2,
                                                 timeout=TIMEOUT) for r in (0, 1)])
        rtest.check_pattern(receiver.receiver.member, 1)
        receiver.destroy()


if __name__ == "__main__":
    unittest.main()
