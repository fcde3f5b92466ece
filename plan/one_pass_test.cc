// The planner's one-pass decision (plan/one_pass.h), through BuildPlan on
// built-in models: which conversions it records as one pass, with which
// cell, and that the decision survives a slice on the wire.
#include "plan/one_pass.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "plan/fingerprint.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"
#include "testing/one_pass_cases.h"
#include "testing/planned_case.h"

namespace refit {
namespace {

using testing::OnePassCase;

// The plan of a case; fails the test if it cannot be built.
Plan PlanOf(const OnePassCase& c) {
  testing::PlannedCase pc;
  const absl::Status st = testing::PlanCase(c.model, c.trainer, c.engine, &pc);
  EXPECT_TRUE(st.ok()) << st;
  return st.ok() ? *pc.plan : Plan();
}

class OnePassTest : public ::testing::TestWithParam<OnePassCase> {};

TEST_P(OnePassTest, RecordsTheDecisionPerConversion) {
  const OnePassCase& c = GetParam();
  const Plan plan = PlanOf(c);
  ASSERT_FALSE(plan.conversions.empty());
  int64_t one = 0, cut = 0;
  for (const Conversion& k : plan.conversions) {
    const std::string what = absl::StrCat(ConversionFormatName(k), " of ",
                                          plan.src.tensors[k.from.tensor].name, " on rank ",
                                          k.from.rank);
    const bool cuts = CutsTiles(plan, k);
    cut += cuts;
    one += k.one_pass;
    switch (c.one_pass) {
      case OnePassCase::kAll:
        EXPECT_TRUE(k.one_pass) << what;
        break;
      case OnePassCase::kNone:
        EXPECT_FALSE(k.one_pass) << what;
        break;
      case OnePassCase::kSome:
        if (cuts) EXPECT_FALSE(k.one_pass) << what;
        break;
    }
    if (k.one_pass) {
      // A cell of whole tiles within 128 x 128.
      const int64_t tr = k.tile[k.tile.size() - 2], tc = k.tile.back();
      EXPECT_GE(k.one_pass_cell_rows, 1) << what;
      EXPECT_LE(k.one_pass_cell_rows, 128) << what;
      EXPECT_LE(k.one_pass_cell_cols, 128) << what;
      EXPECT_EQ(k.one_pass_cell_rows % tr, 0) << what;
      EXPECT_EQ(k.one_pass_cell_cols % tc, 0) << what;
    } else {
      EXPECT_EQ(k.one_pass_cell_rows, 0) << what;
      EXPECT_EQ(k.one_pass_cell_cols, 0) << what;
    }
  }
  if (c.one_pass == OnePassCase::kSome) {
    EXPECT_GT(cut, 0) << "the case cuts blocks";
    EXPECT_GT(one, 0);
    EXPECT_LT(one, static_cast<int64_t>(plan.conversions.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Models, OnePassTest, ::testing::ValuesIn(testing::OnePassCases()));

TEST(OnePassCellTest, InterleavedQkvTakesCellsOfFewerRows) {
  // Megatron's interleaved q/k/v (runs of 64 rows) into MXFP8: cells of at
  // most 64 rows for qkv, 128 x 128 for the plain weights.
  const Plan plan =
      PlanOf({"tiny-qwen3-mx", "megatron:tp=1", "vllm:tp=2,quant=mxfp8", OnePassCase::kAll});
  bool fewer = false, full = false;
  for (const Conversion& k : plan.conversions) {
    ASSERT_TRUE(k.one_pass) << plan.src.tensors[k.from.tensor].name;
    fewer |= k.one_pass_cell_rows < 128;
    full |= k.one_pass_cell_rows == 128 && k.one_pass_cell_cols == 128;
  }
  EXPECT_TRUE(fewer);
  EXPECT_TRUE(full);
}

TEST(OnePassCodecTest, TrainerSlicesKeepTheDecision) {
  const Plan plan = PlanOf({"tiny-qwen3-fp4", "megatron:tp=4,dp=2",
                            "vllm:tp=2,dp=2,quant=nvfp4", OnePassCase::kSome});
  for (int32_t t = 0; t < plan.src.world_size; ++t) {
    absl::StatusOr<Plan> slice = FromProto(ToProto(ExtractSlice(plan, Side::kTrainer, t)));
    ASSERT_TRUE(slice.ok()) << slice.status();
    size_t j = 0;
    for (const Conversion& k : plan.conversions) {
      if (k.from.rank != t) continue;
      ASSERT_LT(j, slice->conversions.size());
      const Conversion& s = slice->conversions[j++];
      EXPECT_EQ(s.one_pass, k.one_pass);
      EXPECT_EQ(s.one_pass_cell_rows, k.one_pass_cell_rows);
      EXPECT_EQ(s.one_pass_cell_cols, k.one_pass_cell_cols);
    }
    EXPECT_EQ(j, slice->conversions.size());
  }
}

TEST(OnePassCodecTest, BadCellIsRefusedNamingTheTensor) {
  const Plan plan = PlanOf({"tiny-qwen3-moe-b128", "megatron:tp=1", "vllm:tp=1,quant=fp8",
                            OnePassCase::kAll});
  refit::v1::PlanProto p = ToProto(ExtractSlice(plan, Side::kTrainer, 0));
  ASSERT_GT(p.conversions_size(), 0);
  p.mutable_conversions(0)->set_one_pass_cell_rows(96);  // not whole 128-row tiles
  absl::StatusOr<Plan> bad = FromProto(p);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("one-pass cell 96 x 128"), std::string::npos)
      << bad.status();
  EXPECT_NE(bad.status().message().find(plan.src.tensors[plan.conversions[0].from.tensor].name),
            std::string::npos)
      << bad.status();
}

TEST(OnePassFingerprintTest, TheDecisionIsPartOfTheFingerprint) {
  Plan plan = PlanOf({"tiny-qwen3-moe-b128", "megatron:tp=1", "vllm:tp=1,quant=fp8",
                      OnePassCase::kAll});
  EXPECT_EQ(PlanFingerprint(plan), plan.fingerprint);
  plan.conversions[0].one_pass = false;
  plan.conversions[0].one_pass_cell_rows = plan.conversions[0].one_pass_cell_cols = 0;
  EXPECT_NE(PlanFingerprint(plan), plan.fingerprint);
}

}  // namespace
}  // namespace refit
