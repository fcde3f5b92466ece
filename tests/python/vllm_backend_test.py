"""refit.vllm against a stand-in of vLLM's weight-transfer protocol
(vllm_harness.py) and a real refitd: an FSDP2 trainer of two ranks (DTensor
stand-ins under wrapper prefixes, through refit.torch) sends into a vLLM
TP1 worker holding the fused layout (qkv_proj, gate_up_proj), through the
"refit" backend and its trainer engine, and through the worker extension
with refit.torch.publish; every engine byte is checked after every round.
The protocol's misuse fails with the documented codes.

  vllm_backend_test.py REFITD LIBREFIT_CLIENT_SO
"""
import os
import sys
import threading
import time
import unittest

REFITD, LIB = (os.path.abspath(p) for p in sys.argv[1:3])
del sys.argv[1:3]
os.environ["REFIT_CLIENT_LIB"] = LIB
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import refit  # noqa: E402
import refit.torch as rt  # noqa: E402
import refit.vllm as rv  # noqa: E402
import standin_torch as st  # noqa: E402
import vllm_harness  # noqa: E402
from refitd_process import Refitd  # noqa: E402

MODEL = "tiny-qwen3"
TRAINER = "fsdp:dp=2"
ENGINE = "vllm:tp=1"
TIMEOUT = 60.0
FUSED = {"self_attn.qkv_proj.weight": ("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                       "self_attn.v_proj.weight"),
         "mlp.gate_up_proj.weight": ("mlp.gate_proj.weight", "mlp.up_proj.weight")}


def trainer_modules():
    """Per trainer rank: a module of Shard(0) DTensors under wrappers, and
    its local tensors by convention name."""
    out = []
    for rank in (0, 1):
        want = refit.expected_buffers(side="trainer", rank=rank, model=MODEL,
                                      convention=TRAINER)
        out.append(st.module_from_specs(want, wrap=lambda n: "module._orig_mod." + n,
                                        dtensor_world=2))
    return out


def engine_model():
    want = refit.expected_buffers(side="engine", rank=0, model=MODEL, convention=ENGINE)
    module, local = st.module_from_specs(want)
    # vLLM models hold more than the convention moves.
    module._params.append(("model.rotary_emb.cos_sin_cache", st.Tensor([4, 4], st.float32)))
    return module, local


def refill(trainers, seed):
    for _, local in trainers:
        for i, t in enumerate(local.values()):
            t.fill_bytes(seed * 1000 + i)


def full(trainers, name):
    """The HF tensor ``name``: its row chunks of both ranks, in order."""
    return b"".join(local[name].raw() for _, local in trainers)


def expected_engine_bytes(trainers, engine_name):
    for fused, parts in FUSED.items():
        if engine_name.endswith(fused):
            prefix = engine_name[:-len(fused)]
            return b"".join(full(trainers, prefix + p) for p in parts)
    return full(trainers, engine_name)


class HarnessTest(unittest.TestCase):
    def setUp(self):
        self.refitd = Refitd(REFITD)
        self.addCleanup(self.refitd.stop)
        # The checkpoint layout, nothing derived (refit.engine_layouts decides
        # this for real models; vllm_generations_test covers the calls).
        rv.layout_hooks = (lambda model: None, lambda model: None)
        self.addCleanup(setattr, rv, "layout_hooks", None)

    def check_engine(self, trainers, engine_local):
        for name, t in engine_local.items():
            want = expected_engine_bytes(trainers, name)
            if name == "model.embed_tokens.weight":
                # vLLM pads the vocabulary; padding rows have no record.
                self.assertLess(len(want), t.nbytes())
                self.assertEqual(t.raw()[:len(want)], want, name)
            else:
                self.assertEqual(t.raw(), want, name)

    def run_ranks(self, fn):
        """fn(rank) on both trainer ranks at once; re-raises the first error."""
        errors = []

        def body(rank):
            try:
                fn(rank)
            except BaseException as e:
                errors.append(e)
        threads = [threading.Thread(target=body, args=(r,)) for r in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT * 2)
        self.assertFalse(any(t.is_alive() for t in threads), "a trainer rank hung")
        if errors:
            raise errors[0]

    def trainer_engines(self, client, trainers, staged=False):
        """The trainer engines of both ranks (rank 0 drives ``client``'s
        workers, staged ones when ``staged``)."""
        engines = [None, None]

        def init(rank):
            source = rv.RefitSource(trainers[rank][0], rank=rank, model=MODEL,
                                    convention=TRAINER)
            info = rv.RefitTrainerInitInfo(
                rank=rank, server=self.refitd.address, world=2, model=MODEL,
                convention=TRAINER, engine_id="e0", engine_convention=ENGINE,
                timeout=TIMEOUT, engine_staged=staged)
            engines[rank] = rv.RefitTrainerEngine.trainer_init(
                {}, info, client=client if rank == 0 else None, source=source)
        self.run_ranks(init)
        return engines

    def test_backend_and_trainer_engine_move_every_round_in_place(self):
        factory = vllm_harness.Factory()
        factory.register_engine("refit", "refit.vllm", "RefitWeightTransferEngine")
        model, engine_local = engine_model()
        worker = vllm_harness.Worker(factory, "refit", 0, model)
        self.assertIsInstance(worker.engine, rv.RefitWeightTransferEngine)
        client = vllm_harness.Client([worker])
        trainers = trainer_modules()
        engines = self.trainer_engines(client, trainers)
        pointers = {n: t.data_ptr() for n, t in engine_local.items()}
        for version in (1, 2):
            refill(trainers, version)
            self.run_ranks(lambda rank: engines[rank].send_weights())
            self.assertEqual(worker.engine.version, version)
            self.check_engine(trainers, engine_local)
        self.assertEqual(pointers, {n: t.data_ptr() for n, t in engine_local.items()})
        for e in engines:
            e.shutdown()
        worker.shutdown()
        self.assertEqual(worker.calls, ["init"] + ["start", "update", "finish"] * 2
                         + ["shutdown"])
        self.assertEqual(client.weight_versions, ["1", "2"])
        self.assertIsNone(worker.engine.member)
        worker.shutdown()  # a second shutdown is a no-op

    def test_a_staged_worker_applies_the_round_that_arrived(self):
        factory = vllm_harness.Factory()
        factory.register_engine("refit", "refit.vllm", "RefitWeightTransferEngine")
        model, engine_local = engine_model()
        worker = vllm_harness.Worker(factory, "refit", 0, model)
        client = vllm_harness.Client([worker])
        trainers = trainer_modules()
        engines = self.trainer_engines(client, trainers, staged=True)
        self.assertIsNotNone(worker.engine.receiver.staged)
        pointers = {n: t.data_ptr() for n, t in engine_local.items()}
        for version in (1, 2, 3):
            refill(trainers, version)
            self.run_ranks(lambda rank: engines[rank].send_weights())
            self.assertEqual(worker.engine.version, version)
            self.assertGreater(worker.engine.last_stats["pause_seconds"], 0)
            self.check_engine(trainers, engine_local)
        self.assertEqual(pointers, {n: t.data_ptr() for n, t in engine_local.items()})
        for e in engines:
            e.shutdown()
        worker.shutdown()

    def test_worker_extension_with_publish_and_the_static_send_hook(self):
        class Worker(rv.RefitWorkerExtension):  # what vLLM mixes the extension into
            def __init__(self, model):
                self.model_runner = type("Runner", (), {"model": model})()
                self.vllm_config = vllm_harness.vllm_config(0)
                self.device = "cpu"
                self.rank = 0

        # vLLM releases' engine base takes (config, parallel_config): the
        # extension must not build a vLLM engine at all.
        def release_init(engine, config, parallel_config):
            raise TypeError("__init__() takes 3 positional arguments but 5 were given")
        saved_init = rv._EngineBase.__init__
        rv._EngineBase.__init__ = release_init
        self.addCleanup(setattr, rv._EngineBase, "__init__", saved_init)
        model, engine_local = engine_model()
        worker = Worker(model)
        trainers = trainer_modules()
        members = [None, None]

        def trainer(rank):
            m = rt.trainer_member(trainers[rank][0], server=self.refitd.address, rank=rank,
                                  model=MODEL, convention=TRAINER, timeout=TIMEOUT)
            m.prepare(timeout=TIMEOUT)
            members[rank] = m

        engine_init = threading.Thread(target=worker.refit_init, args=(
            {"server": self.refitd.address, "engine_id": "e0", "model": MODEL,
             "convention": ENGINE, "timeout": TIMEOUT},))
        engine_init.start()
        self.run_ranks(trainer)
        engine_init.join(TIMEOUT)
        for version in (1, 2):
            refill(trainers, version + 10)
            got = []
            update = threading.Thread(target=lambda: got.append(
                worker.refit_update({"version": version, "timeout": TIMEOUT})))
            update.start()
            # Rank 1 sends from fresh tensors through vLLM's static hook
            # (copied into its registered buffers first); rank 0 publishes.
            fresh = []
            for i, (name, t) in enumerate(trainers[1][1].items()):
                c = st.Tensor(t.shape, t.dtype)
                c.fill_bytes(version * 77 + i)
                fresh.append((name, c))

            def send(rank):
                if rank == 0:
                    rt.publish(members[0], version=version, rank=0, world=2,
                               timeout=TIMEOUT)
                else:
                    rv.RefitWeightTransferEngine.trainer_send_weights(
                        iter(fresh), {"member": members[1], "version": version,
                                      "rank": 1, "world": 2, "timeout": TIMEOUT})
            self.run_ranks(send)
            for name, c in fresh:
                self.assertEqual(trainers[1][1][name].raw(), c.raw(), name)
            update.join(TIMEOUT)
            self.assertEqual(got, [version])
            self.check_engine(trainers, engine_local)
        worker.refit_shutdown()
        for m in members:
            m.close()

    def test_protocol_misuse_fails_with_its_code(self):
        factory = vllm_harness.Factory()
        factory.register_engine("refit", rv.RefitWeightTransferEngine)
        with self.assertRaisesRegex(ValueError, "already registered"):
            factory.register_engine("refit", rv.RefitWeightTransferEngine)
        model, _ = engine_model()
        worker = vllm_harness.Worker(factory, "refit", 0, model)
        for call in (worker.start_weight_update, worker.finish_weight_update,
                     lambda: worker.update_weights({"version": 1})):
            with self.assertRaises(refit.RefitError) as e:
                call()
            self.assertEqual(e.exception.code_name, "FAILED_PRECONDITION")
            self.assertIn("not initialized", str(e.exception))
        with self.assertRaisesRegex(ValueError, "Invalid init_info"):
            worker.init_weight_transfer_engine({"server": "x", "bogus": 1})
        with self.assertRaisesRegex(ValueError, "Invalid update_info"):
            worker.engine.parse_update_info({"round": 3})
        worker.shutdown()  # before init: a no-op

    def test_engine_missing_a_parameter_names_it_before_joining(self):
        factory = vllm_harness.Factory()
        factory.register_engine("refit", rv.RefitWeightTransferEngine)
        model, _ = engine_model()
        gone = model._params.pop(3)[0]
        worker = vllm_harness.Worker(factory, "refit", 0, model)
        with self.assertRaises(refit.RefitError) as e:
            worker.init_weight_transfer_engine({"server": self.refitd.address,
                                                "engine_id": "e0", "model": MODEL,
                                                "convention": ENGINE, "timeout": 5.0})
        self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
        self.assertIn(f"rank 0: parameter {gone}: convention {ENGINE} expects it",
                      str(e.exception))
        self.assertIsNone(worker.engine.member)
        # The worker told refitd: the trainer ranks waiting for their plan
        # fail at once naming it and the parameter, not at their timeouts.
        members = [refit.Member(server=self.refitd.address, side="trainer", rank=r,
                                model=MODEL, convention=TRAINER, buffers=local)
                   for r, (_, local) in enumerate(trainer_modules())]
        start = time.monotonic()
        for m in members:
            with self.assertRaises(refit.FailedPreconditionError) as refused:
                m.prepare(timeout=TIMEOUT)
            self.assertIn("engine e0 rank 0 refused to join", refused.exception.message)
            self.assertIn(f"parameter {gone}", refused.exception.message)
            m.close()
        self.assertLess(time.monotonic() - start, 10.0)

    def test_static_send_hook_names_a_tensor_without_a_buffer(self):
        trainers = trainer_modules()
        m = rt.trainer_member(trainers[0][0], server=self.refitd.address, rank=0,
                              model=MODEL, convention=TRAINER, timeout=TIMEOUT)
        self.addCleanup(m.close)
        with self.assertRaisesRegex(refit.RefitError, "rank 0: parameter lm_head.weight: "
                                    "the member has no buffer of that name"):
            rv.RefitWeightTransferEngine.trainer_send_weights(
                iter([("lm_head.weight", st.Tensor([2, 2]))]),
                {"member": m, "version": 1, "rank": 0, "world": 2})

    def test_register_without_vllm_registers_nothing(self):
        # vllm_generations_*_test registers through vLLM's plugin loader.
        self.assertFalse(rv.register())
        self.assertIsNone(rv.VLLM_INTERFACE)

    def test_engine_without_a_model_names_the_worker_extension(self):
        # vLLM releases build engines as (config, parallel_config).
        with self.assertRaises(refit.RefitError) as e:
            rv.RefitWeightTransferEngine(None, vllm_harness.vllm_config(0).parallel_config)
        self.assertEqual(e.exception.code_name, "FAILED_PRECONDITION")
        self.assertIn('worker_extension_cls="refit.vllm.RefitWorkerExtension"',
                      str(e.exception))

    def test_trainer_engine_takes_only_a_refit_source(self):
        info = rv.RefitTrainerInitInfo(rank=1, server=self.refitd.address, model=MODEL,
                                       convention=TRAINER)
        with self.assertRaisesRegex(refit.RefitError, "rank 1: the refit trainer engine "
                                    "takes a refit.vllm.RefitSource, not a list"):
            rv.RefitTrainerEngine.trainer_init({}, info, client=None, source=[])

    def test_ready_barrier_names_the_rank_that_did_not_report(self):
        trainers = trainer_modules()
        m = rt.trainer_member(trainers[0][0], server=self.refitd.address, rank=0,
                              model=MODEL, convention=TRAINER, timeout=TIMEOUT)
        self.addCleanup(m.close)
        with self.assertRaises(refit.RefitError) as e:
            rt.wait_all_ranks_ready(m, version=7, rank=0, world=2, timeout=1.0)
        self.assertEqual(e.exception.code_name, "DEADLINE_EXCEEDED")
        self.assertIn("rank 1 did not report version 7 ready within 1 s", str(e.exception))
        m.kv_set("refit.torch/ready/7/1", "1")
        rt.wait_all_ranks_ready(m, version=7, rank=0, world=2, timeout=5.0)
        # A rank that cannot publish says why; the barrier fails with it.
        m.kv_set("refit.torch/ready/8/1", "failed: rank 1: parameter w: gone")
        with self.assertRaises(refit.RefitError) as e:
            rt.wait_all_ranks_ready(m, version=8, rank=0, world=2, timeout=60.0)
        self.assertEqual(e.exception.code_name, "FAILED_PRECONDITION")
        self.assertIn("rank 1 cannot publish version 8: rank 1: parameter w: gone",
                      str(e.exception))
        # Rank 0's word reaches the others: a failed start fails them at once.
        m.kv_set("refit.torch/go/9", "failed: rank 0 could not start")
        with self.assertRaises(refit.RefitError) as e:
            rt.start_round_when_ready(m, version=9, rank=1, world=2, timeout=60.0)
        self.assertEqual(e.exception.code_name, "FAILED_PRECONDITION")
        self.assertIn("rank 1: round 9 was not started: rank 0 could not start",
                      str(e.exception))


if __name__ == "__main__":
    unittest.main()
