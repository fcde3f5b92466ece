// Quantize-on-pull (exec/pull/fused_pull.h) on host memory, through the real
// planner and every rank's own slice off the wire: trainers run the
// conversions they keep (two passes: cut tiles with their amax exchange),
// engines pull the rest of their bytes and run
// the fused items on their trainers' BF16, exactly as the pull runner
// wires them (positions of PairSourceBuffers, FusedSources). Every engine
// byte is checked against the reference quantizer (CheckPattern); the
// scratch buffers of fused conversions hold poison, so reading them would
// fail the check.
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/convert/convert.h"
#include "exec/program/copy_program.h"
#include "exec/pull/fused_pull.h"
#include "exec/pull/pull_program.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"
#include "testing/one_pass_cases.h"
#include "testing/planned_case.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

// The members of one plan on host memory, each with its own slice.
struct Members {
  std::vector<Plan> trainer_slices, engine_slices;
  std::vector<std::vector<char*>> trainer_buffers, engine_buffers;
  std::vector<std::vector<std::vector<char>>> scratch;  // owned per trainer
  std::vector<std::set<int32_t>> fused;                 // per trainer
  int64_t conversions = 0, fused_count = 0, items = 0;
};

// Buffers of `mine` (a slice's side) found by name and rank in `full`.
std::vector<char*> ByName(const SideLayout& mine, const SideLayout& full,
                          const HostBuffers& ptrs, int32_t rank) {
  std::vector<char*> out(mine.buffers.size(), nullptr);
  for (size_t b = 0; b < mine.buffers.size(); ++b) {
    if (mine.buffers[b].rank != rank || mine.buffers[b].scratch) continue;
    for (size_t k = 0; k < full.buffers.size() && k < ptrs.size(); ++k) {
      if (full.buffers[k].rank == rank && full.buffers[k].name == mine.buffers[b].name) {
        out[b] = reinterpret_cast<char*>(ptrs[k]);
      }
    }
  }
  return out;
}

// Runs one round: trainers convert what they keep (amaxes exchanged among
// them), engines pull and quantize on pull. Returns the first failure.
absl::Status RunRound(const Plan& plan, const SideLayout& trainer, const HostBuffers& s,
                      const HostBuffers& d, Members* m) {
  const int32_t ws = plan.src.world_size, wd = plan.dst.world_size;
  m->trainer_slices.clear();
  m->engine_slices.clear();
  m->scratch.assign(ws, {});
  m->fused.assign(ws, {});
  std::vector<Converter> converters;
  std::vector<Plan> kept;
  std::vector<std::set<int32_t>> global_only;
  for (int32_t t = 0; t < ws; ++t) {
    REFIT_ASSIGN_OR_RETURN(Plan slice, FromProto(ToProto(ExtractSlice(plan, Side::kTrainer, t))));
    std::vector<char*> buf = ByName(slice.src, trainer, s, t);
    for (size_t b = 0; b < slice.src.buffers.size(); ++b) {
      if (!slice.src.buffers[b].scratch || slice.src.buffers[b].rank != t) continue;
      m->scratch[t].emplace_back(slice.src.buffers[b].byte_size, static_cast<char>(0xAB));
      buf[b] = m->scratch[t].back().data();
    }
    m->fused[t] = FusableConversions(slice, t, {});
    m->conversions += static_cast<int64_t>(slice.conversions.size());
    m->fused_count += static_cast<int64_t>(m->fused[t].size());
    KeptConversions k = WithoutConversions(slice, m->fused[t]);
    kept.push_back(std::move(k.plan));
    global_only.push_back(std::move(k.global_amax));
    m->trainer_slices.push_back(std::move(slice));
    m->trainer_buffers.push_back(std::move(buf));
  }
  // The trainers' conversions, amaxes of cut tiles exchanged.
  auto ops = MakeHostConvertOps();
  std::vector<std::map<int32_t, std::vector<float>>> sent(ws);
  for (int32_t t = 0; t < ws; ++t) {
    REFIT_ASSIGN_OR_RETURN(Converter c, Converter::Create(kept[t], t, global_only[t]));
    REFIT_ASSIGN_OR_RETURN(sent[t], c.Partials(*ops, m->trainer_buffers[t]));
    converters.push_back(std::move(c));
  }
  for (int32_t t = 0; t < ws; ++t) {
    std::map<int32_t, std::vector<float>> received;
    for (const auto& [peer, count] : converters[t].peers()) received[peer] = sent[peer].at(t);
    REFIT_RETURN_IF_ERROR(converters[t].Finish(*ops, m->trainer_buffers[t], received));
  }
  // The engines.
  for (int32_t e = 0; e < wd; ++e) {
    REFIT_ASSIGN_OR_RETURN(Plan slice, FromProto(ToProto(ExtractSlice(plan, Side::kEngine, e))));
    std::vector<char*> dst = ByName(slice.dst, plan.dst, d, e);
    REFIT_ASSIGN_OR_RETURN(PullProgram program, BuildPullProgram(slice, e));
    std::vector<char*> src(slice.src.buffers.size(), nullptr);
    std::map<int32_t, std::vector<FusedSource>> sources;
    for (const PullPeer& peer : program.peers) {
      const int32_t t = peer.src_rank;
      const std::vector<int32_t> exported =
          ExportedSourceBuffers(m->trainer_slices[t], t, e, m->fused[t]);
      if (exported.size() != peer.buffers.size()) {
        return absl::InternalError(absl::StrCat("pair ", t, " -> ", e, ": positions differ"));
      }
      for (size_t p = 0; p < exported.size(); ++p) {
        src[peer.buffers[p]] = m->trainer_buffers[t][exported[p]];
      }
      sources[t] = FusedSourcesOf(m->trainer_slices[t], t, e, m->fused[t]);
    }
    REFIT_ASSIGN_OR_RETURN(FusedProgram fp, BuildFusedItems(slice, e, sources));
    std::vector<CopyTask> tasks;
    for (const CopyTask& k : program.tasks) {
      if (fp.fused_buffers.count(k.src_buffer) == 0) tasks.push_back(k);
    }
    REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> copies,
                           ResolveTasks(tasks, src, dst, nullptr, nullptr));
    RunCopiesHost(copies);
    std::map<int32_t, std::vector<const char*>> by_rank;
    for (const PullPeer& peer : program.peers) {
      by_rank[peer.src_rank] = std::vector<const char*>(src.begin(), src.end());
    }
    REFIT_RETURN_IF_ERROR(AnnotateStatus(RunFusedItemsHost(fp.items, slice, by_rank, dst),
                                         absl::StrCat("engine rank ", e)));
    m->items += static_cast<int64_t>(fp.items.size());
    m->engine_slices.push_back(std::move(slice));
  }
  return absl::OkStatus();
}

class FusedPullTest : public ::testing::TestWithParam<testing::OnePassCase> {};

TEST_P(FusedPullTest, EngineBytesEqualTheReference) {
  const testing::OnePassCase& c = GetParam();
  testing::PlannedCase pc;
  const absl::Status planned = testing::PlanCase(c.model, c.trainer, c.engine, &pc);
  ASSERT_TRUE(planned.ok()) << planned;
  auto& [model, src, dst, plan] = pc;
  const std::map<std::string, DType> source = SourceDTypes(src->layout);
  PatternOptions po{-1, 9};
  po.source_dtypes = &source;
  OwnedBuffers s = AllocateBuffers(src->layout);
  OwnedBuffers d = AllocateBuffers(plan->dst, 0xCD);
  FillPattern(src->layout, s.ptrs, po);
  Members m;
  absl::Status run = RunRound(*plan, src->layout, s.ptrs, d.ptrs, &m);
  ASSERT_TRUE(run.ok()) << run;
  switch (c.one_pass) {
    case testing::OnePassCase::kAll:
      EXPECT_EQ(m.fused_count, m.conversions);
      EXPECT_GT(m.items, 0);
      break;
    case testing::OnePassCase::kSome:
      EXPECT_GT(m.fused_count, 0);
      EXPECT_LT(m.fused_count, m.conversions) << "some conversions keep two passes";
      break;
    case testing::OnePassCase::kNone:
      EXPECT_EQ(m.fused_count, 0);
      break;
  }
  std::printf("%s %s -> %s: %lld of %lld conversions fused, %lld items\n", c.model, c.trainer,
              c.engine, static_cast<long long>(m.fused_count),
              static_cast<long long>(m.conversions), static_cast<long long>(m.items));
  absl::Status st = CheckPattern(plan->dst, d.ptrs, po);
  EXPECT_TRUE(st.ok()) << st.message().substr(0, 600);
}

INSTANTIATE_TEST_SUITE_P(Models, FusedPullTest, ::testing::ValuesIn(testing::OnePassCases()));

// A NaN in a fused weight fails the engine's pass, naming the tensor and
// the trainer rank; nothing is written from the bad region.
TEST(FusedPullErrorsTest, NonFiniteWeightIsNamed) {
  absl::StatusOr<ModelConfig> model = LoadModelConfig("tiny-qwen3-mx");
  ASSERT_TRUE(model.ok());
  absl::StatusOr<MappedSide> src = BuildTrainerLayout(*model, *ParseTrainerSpec("megatron:tp=1"));
  absl::StatusOr<MappedSide> dst =
      BuildEngineLayout(*model, *ParseEngineSpec("vllm:tp=1,quant=mxfp8"));
  ASSERT_TRUE(src.ok() && dst.ok());
  absl::StatusOr<Plan> plan = BuildPlan(src->layout, dst->layout, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  OwnedBuffers s = AllocateBuffers(src->layout);
  OwnedBuffers d = AllocateBuffers(plan->dst);
  FillPattern(src->layout, s.ptrs, {-1, 1});
  const std::string name = "model.layers.1.self_attn.o_proj.weight";
  bool planted = false;
  for (const Record& r : src->layout.records) {
    if (src->layout.tensors[r.tensor].name == name) {
      uint8_t* p = s.ptrs[r.buffer] + r.byte_offset + 2 * 40;
      p[0] = 0xC0;
      p[1] = 0x7F;
      planted = true;
    }
  }
  ASSERT_TRUE(planted);
  Members m;
  absl::Status st = RunRound(*plan, src->layout, s.ptrs, d.ptrs, &m);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()),
              ::testing::HasSubstr("trainer rank 0's tensor " + name));
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("non-finite"));
}

// A receiver refuses descriptions that do not fit its plan or would read
// past the exported buffer, naming the trainer rank (and the tensor).
TEST(FusedPullErrorsTest, MalformedSourcesAreRefused) {
  absl::StatusOr<ModelConfig> model = LoadModelConfig("tiny-qwen3-mx");
  ASSERT_TRUE(model.ok());
  auto src = BuildTrainerLayout(*model, *ParseTrainerSpec("megatron:tp=1"));
  auto dst = BuildEngineLayout(*model, *ParseEngineSpec("vllm:tp=1,quant=mxfp8"));
  ASSERT_TRUE(src.ok() && dst.ok());
  absl::StatusOr<Plan> plan = BuildPlan(src->layout, dst->layout, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Plan ts = ExtractSlice(*plan, Side::kTrainer, 0);
  const Plan es = ExtractSlice(*plan, Side::kEngine, 0);
  const std::vector<FusedSource> good = FusedSourcesOf(ts, 0, 0, FusableConversions(ts, 0, {}));
  ASSERT_FALSE(good.empty());
  ASSERT_TRUE(BuildFusedItems(es, 0, {{0, good}}).ok());
  std::vector<FusedSource> bad = good;
  bad[0].position = 1 << 20;
  absl::StatusOr<FusedProgram> fp = BuildFusedItems(es, 0, {{0, bad}});
  EXPECT_EQ(fp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(fp.status().message()),
              ::testing::HasSubstr("trainer rank 0 describes a malformed quantize-on-pull"));
  bad = good;
  bad[0].buffer_bytes = 64;
  fp = BuildFusedItems(es, 0, {{0, bad}});
  EXPECT_EQ(fp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(fp.status().message()), ::testing::HasSubstr("reads past its buffer"));
  bad = good;
  bad[0].cell_c = 48;  // not whole 1 x 32 blocks
  fp = BuildFusedItems(es, 0, {{0, bad}});
  EXPECT_EQ(fp.status().code(), absl::StatusCode::kInvalidArgument);
  // A record that cuts tiles sends its codes position only, in cells of one
  // 1 x 32 block column.
  for (const int32_t role : {0, 1}) {
    bad = good;
    for (FusedSource& f : bad) {
      if (f.role == role) {
        f.cut = 1;
        f.cell_c = role == 0 ? 64 : 32;
        break;
      }
    }
    fp = BuildFusedItems(es, 0, {{0, bad}});
    EXPECT_EQ(fp.status().code(), absl::StatusCode::kInvalidArgument) << "role " << role;
    EXPECT_THAT(std::string(fp.status().message()),
                ::testing::HasSubstr("malformed quantize-on-pull source"));
  }
}

// Qwen3-8B's plan from `trainer` into `engine` (one lane).
absl::StatusOr<Plan> Qwen3_8bPlan(const char* trainer, const char* engine) {
  REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig("qwen3-8b"));
  REFIT_ASSIGN_OR_RETURN(TrainerSpec t, ParseTrainerSpec(trainer));
  REFIT_ASSIGN_OR_RETURN(EngineSpec e, ParseEngineSpec(engine));
  REFIT_ASSIGN_OR_RETURN(auto src, BuildTrainerLayout(model, t));
  REFIT_ASSIGN_OR_RETURN(auto dst, BuildEngineLayout(model, e));
  PlannerOptions o;
  o.num_lanes = 1;
  return BuildPlan(src.layout, dst.layout, o);
}

// The colocated benchmark's cases (bench/colocated_bench.cc 8b-fp8, 8b-mx, 8b-nv):
// every conversion of Qwen3-8B from Megatron TP1 (interleaved q/k/v, fused
// gate/up) into vLLM TP1 FP8, MXFP8 and NVFP4 fuses, FP8 in whole 128 x 128 cells,
// and the engine's items cover every converted byte it receives.
TEST(FusedPullPlansTest, Qwen3_8bMegatronTp1FusesEverything) {
  for (const char* engine :
       {"vllm:tp=1,quant=fp8", "vllm:tp=1,quant=mxfp8", "vllm:tp=1,quant=nvfp4"}) {
    absl::StatusOr<Plan> plan = Qwen3_8bPlan("megatron:tp=1", engine);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const Plan ts = ExtractSlice(*plan, Side::kTrainer, 0);
    const std::set<int32_t> fused = FusableConversions(ts, 0, {});
    EXPECT_EQ(fused.size(), ts.conversions.size()) << engine;
    const std::vector<FusedSource> sources = FusedSourcesOf(ts, 0, 0, fused);
    for (const FusedSource& f : sources) {
      if (f.format == static_cast<int32_t>(QuantFormat::kFp8Block)) {
        EXPECT_EQ(f.cell_r, 128);
        EXPECT_EQ(f.cell_c, 128);
      }
    }
    const Plan es = ExtractSlice(*plan, Side::kEngine, 0);
    absl::StatusOr<FusedProgram> fp = BuildFusedItems(es, 0, {{0, sources}});
    ASSERT_TRUE(fp.ok()) << fp.status();
    // Every byte of the converted messages is written by an item.
    int64_t converted = 0;
    for (const Segment& s : es.segments) {
      if (fp->fused_buffers.count(es.src.records[s.src_record].buffer)) converted += s.bytes;
    }
    EXPECT_EQ(fp->bytes, converted) << engine;
    std::printf("%s: %zu conversions fused, %zu items, %lld bytes\n", engine, fused.size(),
                fp->items.size(), static_cast<long long>(fp->bytes));
  }
}

// Which NVFP4 parameters the engine computes the global amax of
// (EngineAmaxConversions): every one where one trainer holds it whole and
// the engine reads all of it (Qwen3-8B Megatron TP1 -> vLLM TP1); none
// when two trainers share it (TP2) or the engine reads half (vLLM TP2).
TEST(FusedPullPlansTest, EngineComputesTheAmaxOfWholeParametersOnly) {
  struct Case {
    const char* trainer;
    const char* engine;
    bool all;
  };
  for (const Case& c : {Case{"megatron:tp=1", "vllm:tp=1,quant=nvfp4", true},
                        Case{"megatron:tp=2", "vllm:tp=1,quant=nvfp4", false},
                        Case{"megatron:tp=1", "vllm:tp=2,quant=nvfp4", false}}) {
    absl::StatusOr<Plan> plan = Qwen3_8bPlan(c.trainer, c.engine);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const Plan ts = ExtractSlice(*plan, Side::kTrainer, 0);
    const std::set<int32_t> fused = FusableConversions(ts, 0, {});
    ASSERT_FALSE(fused.empty()) << c.trainer << " -> " << c.engine;
    const std::set<int32_t> engine = EngineAmaxConversions(ts, 0, fused);
    EXPECT_EQ(engine.size(), c.all ? fused.size() : 0u) << c.trainer << " -> " << c.engine;
    int64_t marked = 0, scale2 = 0;
    std::set<int32_t> params;
    for (const FusedSource& f : FusedSourcesOf(ts, 0, 0, fused)) {
      marked += f.engine_amax;
      scale2 += f.scale2_position >= 0;
      if (f.engine_amax == 1) params.insert(f.amax_group);
    }
    // Codes and scales of each; the global scale of each parameter (one
    // for q/k/v, one for gate/up) found at its leading record.
    EXPECT_EQ(marked, c.all ? 2 * static_cast<int64_t>(fused.size()) : 0);
    EXPECT_EQ(scale2, 2 * static_cast<int64_t>(params.size()));
    if (c.all) EXPECT_EQ(params.size(), 36u * 4);  // qkv, o, gate_up, down per layer
  }
}

}  // namespace
}  // namespace refit
