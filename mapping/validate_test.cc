#include "mapping/validate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

MappedSide Engine() {
  auto c = LoadModelConfig("tiny-llama");
  auto s = ParseEngineSpec("vllm:tp=2");
  auto m = BuildEngineLayout(*c, *s);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

TEST(ValidateTest, ExactRegistrationPasses) {
  MappedSide side = Engine();
  std::vector<LocalBuffer> bufs = RankBuffers(side, 1);
  ASSERT_FALSE(bufs.empty());
  EXPECT_TRUE(ValidateRankBuffers(side, 1, bufs).ok());
  // Expected local shapes: qkv_proj on tp=2 = (2 q heads + 1 k + 1 v) x 4.
  bool found = false;
  for (const LocalBuffer& b : bufs) {
    if (b.name == "model.layers.0.self_attn.qkv_proj.weight") {
      found = true;
      EXPECT_EQ(b.shape, (std::vector<int64_t>{16, 16}));
      EXPECT_EQ(b.byte_size, 16 * 16 * 2);
    }
  }
  EXPECT_TRUE(found);
}

TEST(ValidateTest, UnknownNameIsNamedWithRank) {
  MappedSide side = Engine();
  std::vector<LocalBuffer> bufs = RankBuffers(side, 0);
  bufs.push_back({"model.layers.0.self_attn.rotary.weight", {4}, DType::kBF16, 8});
  absl::Status s = ValidateRankBuffers(side, 0, bufs);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("rank 0"));
  EXPECT_THAT(s.message(), HasSubstr("model.layers.0.self_attn.rotary.weight"));
}

TEST(ValidateTest, ShapeAndDtypeMismatchNameTheParameter) {
  MappedSide side = Engine();
  std::vector<LocalBuffer> bufs = RankBuffers(side, 1);
  for (LocalBuffer& b : bufs) {
    if (b.name == "model.layers.2.mlp.down_proj.weight") {
      b.shape = {16, 24};  // unsharded
      b.byte_size = 16 * 24 * 2;
    }
    if (b.name == "model.norm.weight") b.dtype = DType::kF32;
  }
  absl::Status s = ValidateRankBuffers(side, 1, bufs);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("rank 1: parameter model.layers.2.mlp.down_proj.weight "
                        "has shape [16, 24], expected [16, 12]"));
  EXPECT_THAT(s.message(), HasSubstr("model.norm.weight has dtype f32"));
}

TEST(ValidateTest, EveryParameterInTheWrongDtypeIsOneLine) {
  MappedSide side = Engine();
  std::vector<LocalBuffer> bufs = RankBuffers(side, 0);
  ASSERT_GT(bufs.size(), 4u);
  for (LocalBuffer& b : bufs) {
    b.dtype = DType::kF32;  // e.g. numpy float32 arrays for a bf16 model
    b.byte_size *= 2;
  }
  absl::Status s = ValidateRankBuffers(side, 0, bufs);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::count(s.message().begin(), s.message().end(), '\n'), 0) << s.message();
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("rank 0: ", bufs.size(),
                                                  " parameters have dtype f32, expected "
                                                  "bf16: ", bufs[0].name)));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(" and ", bufs.size() - 3, " more")));
}

TEST(ValidateTest, MissingBuffersAreListed) {
  MappedSide side = Engine();
  std::vector<LocalBuffer> bufs = RankBuffers(side, 0);
  bufs.erase(bufs.begin());
  bufs.pop_back();
  absl::Status s = ValidateRankBuffers(side, 0, bufs);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("missing parameters"));
  EXPECT_THAT(s.message(), HasSubstr("model.embed_tokens.weight"));
  EXPECT_THAT(s.message(), HasSubstr("lm_head.weight"));
  EXPECT_FALSE(ValidateRankBuffers(side, 7, bufs).ok());
}

}  // namespace
}  // namespace refit
