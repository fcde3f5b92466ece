#include "exec/transform.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

float F(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t U(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(TransformTest, NegExpFp32MatchesStdExp) {
  std::vector<float> v = {0.0f, 1.0f, -2.5f, 3.0f, -20.0f};
  std::vector<char> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  ASSERT_TRUE(
      ApplyTransformHost(Transform::kNegExp, DType::kF32, bytes.data(), 5).ok());
  for (size_t i = 0; i < v.size(); ++i) {
    float got;
    std::memcpy(&got, bytes.data() + 4 * i, 4);
    // exp in double, rounded once to float; within 1 ulp of float exp.
    EXPECT_EQ(got, static_cast<float>(-std::exp(static_cast<double>(v[i]))))
        << "element " << i;
    EXPECT_TRUE(TransformMatches(DType::kF32, U(-std::exp(v[i])), U(got)))
        << "element " << i;
  }
}

TEST(TransformTest, NegExpBf16AndFp16RoundToNearest) {
  // bf16 1.0 = 0x3F80: -e = -2.71828 -> bf16 0xC02E (-2.71875), nearest.
  EXPECT_EQ(TransformElement(Transform::kNegExp, DType::kBF16, 0x3F80), 0xC02Eu);
  // fp16 0.0 = 0x0000: -1 = 0xBC00; fp16 1.0 = 0x3C00: -e -> 0xC170 (-2.71875).
  EXPECT_EQ(TransformElement(Transform::kNegExp, DType::kF16, 0x0000), 0xBC00u);
  EXPECT_EQ(TransformElement(Transform::kNegExp, DType::kF16, 0x3C00), 0xC170u);
  // Large inputs overflow to -inf in both.
  EXPECT_EQ(TransformElement(Transform::kNegExp, DType::kF16, 0x5640), 0xFC00u);
  EXPECT_EQ(TransformElement(Transform::kNegExp, DType::kBF16, 0x4300), 0xFF80u);
  // NaN stays NaN.
  const uint32_t nan = TransformElement(Transform::kNegExp, DType::kBF16, 0x7FC0);
  EXPECT_TRUE(std::isnan(F(nan << 16)));
}

TEST(TransformTest, MatchesTolerance) {
  EXPECT_TRUE(TransformMatches(DType::kF32, U(-2.0f), U(-2.0f)));
  EXPECT_TRUE(TransformMatches(DType::kF32, U(-2.0f), U(-2.0f) + 1));
  EXPECT_FALSE(TransformMatches(DType::kF32, U(-2.0f), U(-2.0f) + 2));
  EXPECT_FALSE(TransformMatches(DType::kF32, U(2.0f), U(-2.0f)));
  EXPECT_TRUE(TransformMatches(DType::kBF16, 0xC02E, 0xC02F));
  EXPECT_FALSE(TransformMatches(DType::kBF16, 0xC02E, 0xC030));
}

TEST(TransformTest, RunsCoverOnlyTheTransformedRecordsBytes) {
  // One buffer: [A (4 f32, transformed) | 8 pad bytes | D (4 f32)].
  SideLayout side;
  side.world_size = 1;
  side.tensors.push_back(TensorSpec{"layers.0.mixer.A_log", {4}, DType::kF32,
                                    false, Transform::kNegExp});
  side.tensors.push_back(TensorSpec{"layers.0.mixer.D", {4}, DType::kF32});
  side.buffers.push_back(BufferSpec{0, "mixer", 40, {{16, 8}}});
  Record a;
  a.tensor = 0;
  a.box = Box::Unchecked({0}, {4});
  a.dims = RowMajorDims({4});
  Record d = a;
  d.tensor = 1;
  d.byte_offset = 24;
  side.records = {a, d};
  std::vector<TransformRun> runs = TransformRuns(side, 0);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].offset, 0);
  EXPECT_EQ(runs[0].elements, 4);
  std::vector<char> buf(40);
  for (int i = 0; i < 10; ++i) {
    const float x = 0.5f * i;
    std::memcpy(buf.data() + 4 * i, &x, 4);
  }
  const std::vector<char> before = buf;
  char* ptrs[] = {buf.data()};
  ASSERT_TRUE(ApplyTransformRunsHost(runs, ptrs).ok());
  for (int i = 0; i < 4; ++i) {
    float got;
    std::memcpy(&got, buf.data() + 4 * i, 4);
    EXPECT_EQ(got, -std::exp(0.5f * i));
  }
  // Padding and the neighbour D are untouched.
  EXPECT_TRUE(std::equal(buf.begin() + 16, buf.end(), before.begin() + 16));
  EXPECT_TRUE(TransformRuns(side, 1).empty());
}

TEST(TransformTest, IndexedRecordRunsCoverEachBuffer) {
  // A_log of shape [2, 3] (bf16) kept as two per-index buffers of 3
  // elements each at byte 2 (buffer_step 1); the first 2 bytes and the
  // last 2 of each buffer are someone else's.
  SideLayout side;
  side.world_size = 1;
  side.tensors.push_back(TensorSpec{"m.{}.A_log", {2, 3}, DType::kBF16, true,
                                    Transform::kNegExp});
  side.buffers.push_back(BufferSpec{0, "m.0", 10, {}});
  side.buffers.push_back(BufferSpec{0, "m.1", 10, {}});
  Record r;
  r.box = Box::Unchecked({0, 0}, {2, 3});
  r.byte_offset = 2;
  r.dims = RowMajorDims({1, 3});
  r.dims[0].splits = {DimSplit{2, 0}};
  r.buffer_step = 1;
  side.records = {r};
  ASSERT_TRUE(ValidateRecord(side, r).ok()) << ValidateRecord(side, r);
  const std::vector<TransformRun> runs = TransformRuns(side, 0);
  ASSERT_EQ(runs.size(), 2u);
  std::vector<std::vector<char>> bufs(2, std::vector<char>(10));
  for (auto& b : bufs) {
    for (int i = 0; i < 5; ++i) {
      const uint16_t one = 0x3F80;  // bf16 1.0
      std::memcpy(b.data() + 2 * i, &one, 2);
    }
  }
  char* ptrs[] = {bufs[0].data(), bufs[1].data()};
  ASSERT_TRUE(ApplyTransformRunsHost(runs, ptrs).ok());
  for (int b = 0; b < 2; ++b) {
    for (int i = 0; i < 5; ++i) {
      uint16_t h;
      std::memcpy(&h, bufs[b].data() + 2 * i, 2);
      EXPECT_EQ(h, (i >= 1 && i <= 3) ? 0xC02E : 0x3F80)
          << "buffer " << b << " element " << i;
    }
  }
}

TEST(TransformTest, NonFloatDtypeIsRejectedNamingTheTensor) {
  TensorSpec t{"layers.0.mixer.A_log", {4}, DType::kI32, false,
               Transform::kNegExp};
  absl::Status s = ValidateTensorSpec(t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("layers.0.mixer.A_log"));
  std::vector<char> b(16);
  EXPECT_EQ(ApplyTransformHost(Transform::kNegExp, DType::kI32, b.data(), 4).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace refit
