// RankOnly (mapping/layout_builder.h) against the whole side, for the
// conventions of real model families: every rank's reduced layout lists
// the same buffers, accepts the same registration, and gets the same bytes
// from a pattern fill as that rank of the whole side.
#include <cstring>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "mapping/validate.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

absl::StatusOr<MappedSide> Build(const std::string& model, bool trainer,
                                 const std::string& convention) {
  REFIT_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model));
  return BuildSideLayout(config, trainer, convention);
}

struct Case {
  const char* model;
  bool trainer;
  const char* convention;
};

class RankOnlyTest : public ::testing::TestWithParam<Case> {};

TEST_P(RankOnlyTest, EachRankAsOnTheWholeSide) {
  const Case& c = GetParam();
  absl::StatusOr<MappedSide> side = Build(c.model, c.trainer, c.convention);
  ASSERT_TRUE(side.ok()) << side.status();
  OwnedBuffers whole = AllocateBuffers(side->layout);
  for (int32_t rank = 0; rank < side->layout.world_size; ++rank) {
    SCOPED_TRACE(rank);
    MappedSide one = RankOnly(*side, rank);
    const std::vector<LocalBuffer> want = RankBuffers(*side, rank);
    ASSERT_EQ(RankBuffers(one, rank).size(), want.size());
    EXPECT_TRUE(ValidateRankBuffers(one, rank, want).ok());
    EXPECT_EQ(ValidateRankBuffers(one, rank, {}).message(),
              ValidateRankBuffers(*side, rank, {}).message());

    FillPattern(side->layout, whole.ptrs, {rank, 7});
    OwnedBuffers mine = AllocateBuffers(one.layout);
    FillPattern(one.layout, mine.ptrs, {rank, 7});
    EXPECT_TRUE(CheckPattern(one.layout, mine.ptrs, {rank, 7}).ok());
    const int32_t begin = side->rank_begin[rank];
    for (size_t b = 0; b < want.size(); ++b) {
      ASSERT_EQ(mine.storage[b].size(), whole.storage[begin + b].size());
      EXPECT_EQ(mine.storage[b], whole.storage[begin + b]) << want[b].name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Conventions, RankOnlyTest,
    ::testing::Values(Case{"tiny-qwen3", true, "megatron:tp=2,pp=2"},
                      Case{"tiny-qwen3", false, "vllm:tp=2,dp=2"},
                      Case{"tiny-deepseek-v3", true, "megatron:tp=2,dp=2,ep=4,etp=1"},
                      Case{"tiny-deepseek-v3-fp8", false, "vllm:tp=2,dp=2"},
                      Case{"tiny-deepseek-v3", true, "fsdp:dp=2"}));

}  // namespace
}  // namespace refit
