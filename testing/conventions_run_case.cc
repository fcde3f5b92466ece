// RunCase: one conventions case end to end, mapping/'s layouts, the
// planner and the reference copy against the statements of
// conventions_reference.h.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "mapping/scatter.h"
#include "mapping/validate.h"
#include "plan/planner.h"
#include "testing/conventions_reference.h"
#include "testing/reference_copy.h"

namespace refit::testing {

using testing_mapping::Arr;
using testing_mapping::Bufs;
using testing_mapping::Member;

namespace {

std::vector<LocalBuffer> AsLocal(const Bufs& b) {
  std::vector<LocalBuffer> out;
  for (const auto& kv : b) {
    out.push_back({kv.first, kv.second.shape, kv.second.dtype,
                   static_cast<int64_t>(kv.second.bytes.size())});
  }
  return out;
}

// Memory of a side in layout buffer order, from per-rank expected buffers.
std::vector<std::vector<uint8_t>> Memory(const MappedSide& side,
                                         const std::vector<Bufs>& bufs) {
  std::vector<std::vector<uint8_t>> mem;
  for (const BufferSpec& b : side.layout.buffers) {
    mem.push_back(bufs[b.rank].at(b.name).bytes);
  }
  return mem;
}

}  // namespace

void RunCase(const std::string& model, const std::string& trainer,
             const TrainerExpect& expect_trainer, const std::string& engine,
             int64_t tp, int64_t dp, bool ep) {
  SCOPED_TRACE(absl::StrCat(model, " ", trainer, " -> ", engine));
  absl::StatusOr<ModelConfig> c =
      model[0] == '{' ? ParseModelConfig(model) : LoadModelConfig(model);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<TrainerSpec> ts = ParseTrainerSpec(trainer);
  ASSERT_TRUE(ts.ok()) << ts.status();
  absl::StatusOr<EngineSpec> es = ParseEngineSpec(engine);
  ASSERT_TRUE(es.ok()) << es.status();
  absl::StatusOr<MappedSide> src = BuildTrainerLayout(*c, *ts);
  ASSERT_TRUE(src.ok()) << src.status();
  absl::StatusOr<MappedSide> dst = BuildEngineLayout(*c, *es);
  ASSERT_TRUE(dst.ok()) << dst.status();
  // The same logical tensors on both sides; only engine tensors may carry
  // a transform, and only Mamba's A_log does, as the f32 parameter vLLM and
  // SGLang create (they keep -exp(A_log)).
  int transformed = 0;
  {
    std::vector<TensorSpec> plain = dst->layout.tensors;
    for (TensorSpec& t : plain) {
      if (t.transform != Transform::kNone) {
        ++transformed;
        EXPECT_TRUE(absl::EndsWith(t.name, "mixer.A_log")) << t.name;
        EXPECT_EQ(t.transform, Transform::kNegExp) << t.name;
        EXPECT_EQ(t.dtype, DType::kF32) << t.name;
        t.dtype = DType::kBF16;
      }
      t.transform = Transform::kNone;
    }
    ASSERT_EQ(src->layout.tensors, plain);
  }
  if (absl::StrContains(model, "nemotron")) {
    EXPECT_GT(transformed, 0) << "NemotronH's A_log must be transformed";
  }

  Checkpoint ck(testing_mapping::FillCheckpoint(src->layout.tensors, 42));
  std::vector<Bufs> tb = expect_trainer(*c, ck);
  const bool sglang = es->kind == EngineSpec::Kind::kSglang;
  std::vector<Bufs> eb =
      ExpectVllm(*c, ck, tp, dp, ep, sglang, sglang ? es->ep : 0, es->round_robin);
  EXPECT_THAT(ck.Unused(), ::testing::IsEmpty())
      << "tensors of the model family that no convention statement expects";
  ASSERT_EQ(static_cast<int64_t>(tb.size()), src->layout.world_size);
  ASSERT_EQ(static_cast<int64_t>(eb.size()), dst->layout.world_size);
  for (int32_t r = 0; r < src->layout.world_size; ++r) {
    absl::Status s = ValidateRankBuffers(*src, r, AsLocal(tb[r]));
    ASSERT_TRUE(s.ok()) << "trainer " << s;
  }
  for (int32_t r = 0; r < dst->layout.world_size; ++r) {
    absl::Status s = ValidateRankBuffers(*dst, r, AsLocal(eb[r]));
    ASSERT_TRUE(s.ok()) << "engine " << s;
  }
  for (const Record& r : src->layout.records) {
    ASSERT_TRUE(ValidateRecord(src->layout, r).ok()) << ValidateRecord(src->layout, r);
  }
  for (const Record& r : dst->layout.records) {
    ASSERT_TRUE(ValidateRecord(dst->layout, r).ok()) << ValidateRecord(dst->layout, r);
  }
  std::vector<std::vector<uint8_t>> src_mem = Memory(*src, tb);
  absl::Status s = testing_mapping::CheckRecords(src->layout, src_mem, ck.all());
  ASSERT_TRUE(s.ok()) << "trainer " << s;
  std::vector<std::vector<uint8_t>> expected = Memory(*dst, eb);
  // What the engine holds: the checkpoint, with A = -exp(A_log) in f32.
  auto engine_ck = ck.all();
  for (const TensorSpec& t : dst->layout.tensors) {
    if (t.transform == Transform::kNegExp) {
      engine_ck[t.name] = NegExpF32(Piece{engine_ck.at(t.name)}).w;
    }
  }
  s = testing_mapping::CheckRecords(dst->layout, expected, engine_ck);
  ASSERT_TRUE(s.ok()) << "engine " << s;

  // ScatterToRecord builds the same trainer buffers from the checkpoint
  // (stacked tensors member by member); GatherFromRecord reads every
  // engine tensor back whole.
  {
    std::vector<std::vector<uint8_t>> built;
    for (const BufferSpec& b : src->layout.buffers) built.emplace_back(b.byte_size, 0);
    for (const Record& r : src->layout.records) {
      const TensorSpec& t = src->layout.tensors[r.tensor];
      const Arr& full = ck.all().at(t.name);
      if (t.stacked) {
        for (int64_t e = 0; e < t.shape[0]; ++e) {
          Arr m = Member(full, e);
          ASSERT_TRUE(ScatterToRecord(src->layout, r, e, m.bytes,
                                      absl::MakeSpan(built[r.buffer])).ok());
        }
      } else {
        ASSERT_TRUE(ScatterToRecord(src->layout, r, -1, full.bytes,
                                    absl::MakeSpan(built[r.buffer])).ok());
      }
    }
    for (size_t b = 0; b < built.size(); ++b) {
      EXPECT_TRUE(built[b] == src_mem[b])
          << "scattered trainer buffer " << src->layout.buffers[b].name
          << " on rank " << src->layout.buffers[b].rank;
    }
    std::map<std::string, std::vector<uint8_t>> back;
    for (const Record& r : dst->layout.records) {
      const TensorSpec& t = dst->layout.tensors[r.tensor];
      auto& full = back[t.name];
      if (full.empty()) full.assign(engine_ck.at(t.name).bytes.size(), 0);
      ASSERT_TRUE(GatherFromRecord(dst->layout, r, -1, expected[r.buffer],
                                   absl::MakeSpan(full)).ok());
    }
    for (const auto& kv : engine_ck) {
      EXPECT_TRUE(back[kv.first] == kv.second.bytes) << "gathered " << kv.first;
    }
  }

  // Engine memory starts as a marker: padding (vocab rows) must stay
  // untouched by the copy, everything else must be overwritten.
  constexpr uint8_t kMarker = 0xA5;
  std::vector<std::vector<uint8_t>> dst_mem;
  for (const BufferSpec& b : dst->layout.buffers) {
    dst_mem.emplace_back(b.byte_size, kMarker);
  }
  // The real planner moves the bytes: BuildPlan, then ReferenceCopy
  // performs its segments (the expectation above stays independent).
  absl::StatusOr<Plan> plan = BuildPlan(src->layout, dst->layout, PlannerOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  HostBuffers src_ptrs, dst_ptrs;
  for (auto& m : src_mem) src_ptrs.push_back(m.data());
  for (auto& m : dst_mem) dst_ptrs.push_back(m.data());
  s = ReferenceCopy(*plan, src_ptrs, dst_ptrs);
  ASSERT_TRUE(s.ok()) << s;
  for (size_t b = 0; b < dst_mem.size(); ++b) {
    for (const ByteRange& p : dst->layout.buffers[b].padding) {
      for (int64_t i = p.begin; i < p.end(); ++i) {
        ASSERT_EQ(dst_mem[b][i], kMarker)
            << "padding byte " << i << " of engine buffer "
            << dst->layout.buffers[b].name << " on rank "
            << dst->layout.buffers[b].rank << " was written";
        dst_mem[b][i] = 0;  // the expectation has zero padding
      }
    }
  }
  // Everything is byte for byte the expectation (A as -exp in f32).
  for (size_t b = 0; b < dst_mem.size(); ++b) {
    EXPECT_TRUE(dst_mem[b] == expected[b])
        << "engine rank " << dst->layout.buffers[b].rank << " buffer "
        << dst->layout.buffers[b].name << " differs after the copy";
  }
}

}  // namespace refit::testing
