"""refit.vllm against stand-ins of vLLM's weight-transfer interface
(standin_vllm/current: vLLM main as read 2026-12-06, under
vllm.distributed.weight_transfer; standin_vllm/pr54654: the same API under
vllm.backends.distributed.weight_transfer, as built from the unmerged
vllm-project/vllm#54654; standin_vllm/pinned: commit 02f250b) and a real
refitd over the host path: import, the vllm.general_plugins entry point, the
trainer factory's dispatch, engine rank numbering under DP (dense and MoE,
dp=2 x tp=2 gives engine ranks 0..3), every engine byte of every rank after
every round (refit.testing's pattern), the version vLLM records, derived-
tensor refresh after each round, LoRA adapters unloaded after each update,
draft-model and LoRA refusals, list payloads, checksums in vLLM's checker
form, and the worker extension.

  vllm_generations_test.py REFITD LIBREFIT_CLIENT_TESTING_SO GENERATION
"""
import os
import sys
import tempfile
import types
import unittest

REFITD, LIB = (os.path.abspath(p) for p in sys.argv[1:3])
GENERATION = sys.argv[3]
del sys.argv[1:4]
os.environ["REFIT_CLIENT_LIB"] = LIB
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "standin_vllm", GENERATION))

import refit  # noqa: E402
import refit.testing as rtest  # noqa: E402
rtest.load_library()
import refit.vllm as rv  # noqa: E402
import standin_torch as st  # noqa: E402
from concurrently import run_all  # noqa: E402
from engine_fixtures import trainer_source, vllm_model as engine_model  # noqa: E402
from refitd_process import Refitd  # noqa: E402
import importlib  # noqa: E402
ROOT = ("vllm.backends.distributed.weight_transfer" if GENERATION == "pr54654"
        else "vllm.distributed.weight_transfer")
factory = importlib.import_module(ROOT + ".factory")
import refit.checksums as rc  # noqa: E402
from vllm.v1.worker.gpu_worker import LLM, Worker  # noqa: E402

TIMEOUT = 60.0
TRAINER = "fsdp:dp=2"
DENSE = ("tiny-qwen3", "vllm:tp=2,dp=2")
MOE = ("tiny-qwen3-moe", "vllm:tp=2,dp=2,ep=4")


class Hooks:
    """The kernel-layout detector and derived-tensor refresh refit.vllm
    calls (refit.engine_layouts' in production), recording their calls."""

    def __init__(self, kernel=None, error=None):
        self.kernel, self.error, self.refreshed = kernel, error, []

    def detect(self, model):
        if self.error:
            raise self.error
        return self.kernel

    def refresh(self, model):
        self.refreshed.append(model)


def parallel_config(dp, tp, *, moe):
    """vLLM's ParallelConfig in a worker of replica ``dp`` of 2 (vLLM's
    run_engine_core): ``rank`` inside the replica; a dense model's replicas
    run as independent DP=1 engines (data_parallel_size 1,
    data_parallel_rank 0); data_parallel_index keeps the replica."""
    return types.SimpleNamespace(rank=tp, world_size=2, tensor_parallel_size=2,
                                 pipeline_parallel_size=1,
                                 data_parallel_size=2 if moe else 1,
                                 data_parallel_rank=dp if moe else 0,
                                 data_parallel_index=dp)


def trainer_init(info, client, source):
    """Through vLLM's trainer factory, as a user of this generation calls it."""
    f = factory.WeightTransferTrainerFactory
    if GENERATION != "pinned":
        return f.trainer_init(init_info=info, client=client, source=source)
    return f.trainer_init("refit", {}, info, client=client, source=source)


class GenerationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rv.register()

    def setUp(self):
        self.refitd = Refitd(REFITD)
        self.addCleanup(self.refitd.stop)
        self.hooks = Hooks()
        rv.layout_hooks = (self.hooks.detect, self.hooks.refresh)
        self.addCleanup(setattr, rv, "layout_hooks", None)

    def test_detects_this_generation(self):
        self.assertEqual(rv.VLLM_INTERFACE, "pinned" if GENERATION == "pinned" else "current")
        self.assertEqual(rv.VLLM_IMPORT_ROOT, ROOT)
        self.assertTrue(rv.HAVE_VLLM)
        self.assertEqual(rv.RefitTrainerInitInfo.backend, "refit")

    def test_general_plugin_entry_point_registers_both_factories(self):
        import vllm.plugins as plugins
        with tempfile.TemporaryDirectory() as d:
            dist = os.path.join(d, "refit_weights-0.0.dist-info")
            os.mkdir(dist)
            with open(os.path.join(dist, "METADATA"), "w") as f:
                f.write("Metadata-Version: 2.1\nName: refit-weights\nVersion: 0.0\n")
            with open(os.path.join(dist, "entry_points.txt"), "w") as f:
                f.write("[vllm.general_plugins]\nrefit = refit.vllm:register\n")
            sys.path.insert(0, d)
            try:
                plugins.load_general_plugins()
            finally:
                sys.path.remove(d)
        self.assertEqual(plugins.errors, [])
        self.assertIs(factory.WeightTransferEngineFactory._registry["refit"](),
                      rv.RefitWeightTransferEngine)
        self.assertIs(factory.WeightTransferTrainerFactory._registry["refit"](),
                      rv.RefitTrainerEngine)

    def rounds(self, model, convention, *, moe):
        workers = [Worker(backend="refit", parallel_config=parallel_config(dp, tp, moe=moe),
                          model=engine_model(model, convention, dp * 2 + tp), moe=moe)
                   for dp in (0, 1) for tp in (0, 1)]
        for w in workers:
            w.lora_adapters.add(1)
        llm = LLM(workers)
        info = [rv.RefitTrainerInitInfo(rank=r, server=self.refitd.address, world=2,
                                        model=model, convention=TRAINER, engine_id="e0",
                                        engine_convention=convention, timeout=TIMEOUT)
                for r in (0, 1)]
        engines = [None, None]

        def init(r):
            engines[r] = trainer_init(info[r], llm if r == 0 else None,
                                      trainer_source(model, r))
        run_all([lambda r=r: init(r) for r in (0, 1)])
        self.assertIsInstance(engines[0], rv.RefitTrainerEngine)
        self.assertEqual([w.weight_transfer_engine.receiver.rank for w in workers],
                         [0, 1, 2, 3])
        for v in (1, 2):
            for e in engines:
                rtest.fill_pattern(e.member, v)
            run_all([e.send_weights for e in engines])
            for w in workers:
                rtest.check_pattern(w.weight_transfer_engine.member, v)
                self.assertEqual(w.weight_transfer_engine.version, v)
                # vLLM unloads every LoRA adapter after a base-weight update.
                self.assertEqual((w.lora_adapters, w.lora_resets), (set(), v))
                # What refit wrote, in vLLM's checker form, is what vLLM's
                # own checker (an independent SHA-256 of the tensors) says.
                mine = w.weight_transfer_engine.checksums()
                self.assertEqual(len(mine), len(w.weight_transfer_engine.member.buffers))
                self.assertEqual(rc.mismatches(mine, w.compute_weight_checksums()), [])
            if GENERATION != "pinned":
                self.assertEqual(llm.weight_version, str(v))
        self.assertEqual(len(self.hooks.refreshed), 2 * len(workers))
        for e in engines:
            e.shutdown()
        for w in workers:
            w.shutdown()
            self.assertIsNone(w.weight_transfer_engine.member)

    def test_dense_dp2_tp2_rounds_reach_engine_ranks_0_to_3(self):
        self.rounds(*DENSE, moe=False)

    def test_moe_dp2_tp2_rounds_reach_engine_ranks_0_to_3(self):
        self.rounds(*MOE, moe=True)

    def test_draft_model_updates_are_refused(self):
        draft = st.Module([])
        worker = Worker(backend="refit", parallel_config=parallel_config(0, 0, moe=False),
                        model=engine_model(*DENSE, 0), draft_model=draft)
        engine = worker.weight_transfer_engine
        self.assertFalse(engine.supports_draft_weight_update)
        with self.assertRaisesRegex(RuntimeError, "RefitWeightTransferEngine does not "
                                    "support draft model weight updates"):
            worker.start_draft_weight_update()
        with self.assertRaises(refit.RefitError) as e:
            engine.set_weight_update_target(draft, "draft")
        self.assertEqual(e.exception.code_name, "FAILED_PRECONDITION")
        self.assertIn("refuses draft-model weight updates", str(e.exception))
        self.assertIs(engine.model, worker.weight_transfer_engine._default_model)

    def test_lora_weight_updates_are_refused_naming_lora(self):
        worker = Worker(backend="refit", parallel_config=parallel_config(0, 0, moe=False),
                        model=engine_model(*DENSE, 0))
        worker.lora_adapters.add(7)
        engine = worker.weight_transfer_engine
        self.assertIs(engine.supports_lora_weight_update, False)
        with self.assertRaisesRegex(RuntimeError, "RefitWeightTransferEngine does not "
                                    "support LoRA weight updates"):
            worker.start_lora_weight_update({"lora_int_id": 7})
        with self.assertRaises(refit.FailedPreconditionError) as e:
            engine.set_weight_update_target(("lora", 7), None, requires_model_reload=False)
        self.assertIn("engine ?: refit refuses LoRA weight updates", e.exception.message)

    def test_a_list_payload_gives_each_worker_its_entry(self):
        pc = parallel_config(1, 1, moe=False)  # data_parallel_index 1, world 2, rank 1
        infos = [{"version": i} for i in range(4)]
        self.assertEqual(rv.local_update_info(infos, pc), {"version": 3})
        self.assertEqual(rv.local_update_info({"version": 9}, pc), {"version": 9})
        with self.assertRaisesRegex(refit.InvalidArgumentError,
                                    "lists 2 workers' infos; this worker's is entry 3"):
            rv.local_update_info(infos[:2], pc)

    def test_rank_checks_name_what_differs(self):
        pc = parallel_config(1, 1, moe=False)
        self.assertEqual(rv.engine_rank(pc, "vllm:tp=2,dp=2"), 3)
        for conv, text in (("vllm:tp=4,dp=2", "tp=4, but the vllm engine runs tp=2"),
                           ("vllm:tp=2", "vLLM's DP replica 1 is outside dp=1")):
            with self.assertRaisesRegex(refit.RefitError, text):
                rv.engine_rank(pc, conv)
        moe = parallel_config(1, 0, moe=True)
        self.assertEqual(rv.engine_rank(moe, "vllm:tp=2,dp=2,ep=4"), 2)
        with self.assertRaisesRegex(refit.RefitError, "dp=4, but the vllm engine runs dp=2"):
            rv.engine_rank(moe, "vllm:tp=2,dp=4,ep=8")
        pc = parallel_config(1, 1, moe=False)
        pc.pipeline_parallel_size = 2
        with self.assertRaisesRegex(refit.RefitError, "pipeline parallelism \\(pp=2\\)"):
            rv.engine_rank(pc, "vllm:tp=2,dp=2")

    def test_block_fp8_scales_renamed_after_loading_map_back(self):
        from refit.engine_worker import block_scale_rename
        rename = block_scale_rename({"model.layers.0.mlp.down_proj.weight_scale_inv",
                                     "model.layers.0.self_attn.o_proj.weight_scale"})
        self.assertEqual(rename("model.layers.0.mlp.down_proj.weight_scale"),
                         "model.layers.0.mlp.down_proj.weight_scale_inv")
        # A name the convention lists as it is keeps it.
        self.assertEqual(rename("model.layers.0.self_attn.o_proj.weight_scale"),
                         "model.layers.0.self_attn.o_proj.weight_scale")
        self.assertEqual(rename("model.norm.weight"), "model.norm.weight")

    def test_kernel_layout_joins_the_convention_or_refuses(self):
        from refit.engine_worker import with_kernel
        self.assertEqual(with_kernel("vllm:tp=2", "deepgemm"), "vllm:tp=2,kernel=deepgemm")
        self.assertEqual(with_kernel("vllm:tp=2", None), "vllm:tp=2")
        self.assertEqual(with_kernel("vllm:tp=2,kernel=checkpoint", None),
                         "vllm:tp=2,kernel=checkpoint")
        with self.assertRaisesRegex(refit.RefitError, "kernel=flashinfer, but the worker's "
                                    "layers read kernel=deepgemm"):
            with_kernel("vllm:tp=2,kernel=flashinfer", "deepgemm")
        self.hooks.error = refit.RefitError(3, "layer model.layers.0.mlp.experts: "
                                               "FlashInfer TRTLLM MoE")
        worker = Worker(backend="refit", parallel_config=parallel_config(0, 0, moe=False),
                        model=engine_model(*DENSE, 0))
        with self.assertRaisesRegex(refit.RefitError, "FlashInfer TRTLLM MoE"):
            worker.init_weight_transfer_engine({"server": self.refitd.address,
                                                "engine_id": "e0", "model": DENSE[0],
                                                "convention": DENSE[1], "timeout": 5.0})
        self.assertIsNone(worker.weight_transfer_engine.member)

    def test_worker_extension_builds_no_vllm_engine(self):
        class W(rv.RefitWorkerExtension):  # what vLLM mixes the extension into
            def __init__(self, model, pc):
                self.model_runner = types.SimpleNamespace(model=model)
                self.vllm_config = types.SimpleNamespace(parallel_config=pc)
                self.device = "cpu"
        conv = "vllm:tp=1"
        w = W(engine_model(DENSE[0], conv, 0), types.SimpleNamespace(
            rank=0, tensor_parallel_size=1, data_parallel_size=1, data_parallel_index=0))
        tr = trainer_source(DENSE[0], 0), trainer_source(DENSE[0], 1)
        members = [refit.Member(server=self.refitd.address, side="trainer", rank=r,
                                model=DENSE[0], convention=TRAINER, buffers=tr[r].buffers(),
                                timeout=TIMEOUT) for r in (0, 1)]
        run_all([lambda: w.refit_init({"server": self.refitd.address, "engine_id": "e0",
                                       "model": DENSE[0], "convention": conv,
                                       "timeout": TIMEOUT})]
                + [lambda m=m: m.prepare(timeout=TIMEOUT) for m in members])
        got = []
        for m in members:
            rtest.fill_pattern(m, 1)
        run_all([lambda: got.append(w.refit_update({"version": 1, "timeout": TIMEOUT}))]
                + [lambda r=r: rv._rt.publish(members[r], version=1, rank=r, world=2,
                                              timeout=TIMEOUT) for r in (0, 1)])
        self.assertEqual(got, [1])
        rtest.check_pattern(w._refit_receiver.member, 1)
        with self.assertRaisesRegex(ValueError, "Invalid update_info"):
            w.refit_update({"round": 2})
        w.refit_shutdown()
        for m in members:
            m.close()


if __name__ == "__main__":
    unittest.main()
