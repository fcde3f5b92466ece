#include "exec/delta/delta_codec.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace refit {
namespace {

using Bytes = std::vector<uint8_t>;

// `n` words of `w` bytes, and a copy with about `fraction` of words changed.
std::pair<Bytes, Bytes> SnapshotAndCurrent(int64_t n, int w, double fraction, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes snap(n * w);
  for (auto& b : snap) b = static_cast<uint8_t>(rng());
  Bytes cur = snap;
  std::bernoulli_distribution change(fraction);
  for (int64_t i = 0; i < n; ++i) {
    if (change(rng)) cur[i * w + rng() % w] ^= static_cast<uint8_t>(1 + rng() % 255);
  }
  return {snap, cur};
}

Bytes Encode(const Bytes& cur, const Bytes& snap, int w, DeltaEncoding e) {
  const int64_t c = CountChangedWords(cur, snap, w);
  const int64_t n = static_cast<int64_t>(cur.size()) / w;
  Bytes out(sizeof(DeltaHeader) + DeltaPayloadBytes(e, w, n, e == DeltaEncoding::kDense ? n : c));
  auto written = EncodeDelta(cur, snap, w, e, c, absl::MakeSpan(out));
  EXPECT_TRUE(written.ok()) << written.status();
  if (written.ok()) {
    EXPECT_EQ(*written, static_cast<int64_t>(out.size()));
  }
  return out;
}

TEST(DeltaCodecTest, EveryEncodingRestoresTheCurrentBytes) {
  for (int w : {1, 2, 4, 8}) {
    for (double f : {0.0, 0.005, 0.02, 0.2, 1.0}) {
      for (DeltaEncoding e :
           {DeltaEncoding::kDense, DeltaEncoding::kIndices, DeltaEncoding::kBitmask}) {
        auto [snap, cur] = SnapshotAndCurrent(1001, w, f, 7 * w);
        Bytes enc = Encode(cur, snap, w, e);
        Bytes target = snap;
        ASSERT_TRUE(ApplyDelta(enc, absl::MakeSpan(target)).ok());
        EXPECT_EQ(target, cur) << DeltaEncodingName(e) << " w=" << w << " f=" << f;
        // Exact values, not differences: applying again changes nothing.
        ASSERT_TRUE(ApplyDelta(enc, absl::MakeSpan(target)).ok());
        EXPECT_EQ(target, cur);
      }
    }
  }
}

TEST(DeltaCodecTest, ChoosesTheSmallestEncoding) {
  const int64_t n = 1 << 20;
  // BF16 words: indices below 1/32 changed, the bitmask above, dense near all.
  EXPECT_EQ(ChooseEncoding(2, n, n / 50), DeltaEncoding::kIndices);   // 2%
  EXPECT_EQ(ChooseEncoding(2, n, n / 20), DeltaEncoding::kBitmask);   // 5%
  EXPECT_EQ(ChooseEncoding(2, n, n * 95 / 100), DeltaEncoding::kDense);
  EXPECT_EQ(ChooseEncoding(1, n, n / 300), DeltaEncoding::kIndices);  // FP8 codes
  // At 2% of BF16 words the message is at most a tenth of dense.
  EXPECT_LE(DeltaPayloadBytes(DeltaEncoding::kIndices, 2, n, n / 50), n * 2 / 10);
  // Indices cannot address past 2^32 words.
  EXPECT_EQ(DeltaPayloadBytes(DeltaEncoding::kIndices, 1, (int64_t{1} << 32) + 1, 1), -1);
  EXPECT_NE(ChooseEncoding(1, (int64_t{1} << 32) + 1, 1), DeltaEncoding::kIndices);
}

TEST(DeltaCodecTest, EncodeRefusesWrongArguments) {
  auto [snap, cur] = SnapshotAndCurrent(64, 2, 0.1, 3);
  Bytes out(4096);
  const int64_t c = CountChangedWords(cur, snap, 2);
  EXPECT_EQ(EncodeDelta(cur, snap, 3, DeltaEncoding::kBitmask, c, absl::MakeSpan(out))
                .status().code(), absl::StatusCode::kInvalidArgument);
  Bytes short_snap(snap.begin(), snap.end() - 2);
  EXPECT_EQ(EncodeDelta(cur, short_snap, 2, DeltaEncoding::kBitmask, c, absl::MakeSpan(out))
                .status().code(), absl::StatusCode::kInvalidArgument);
  Bytes tiny(8);
  EXPECT_EQ(EncodeDelta(cur, snap, 2, DeltaEncoding::kBitmask, c, absl::MakeSpan(tiny))
                .status().code(), absl::StatusCode::kInvalidArgument);
  // A wrong count is caught, not written as a short message.
  if (c > 0) {
    EXPECT_FALSE(EncodeDelta(cur, snap, 2, DeltaEncoding::kIndices, c - 1,
                             absl::MakeSpan(out)).ok());
  }
  EXPECT_FALSE(EncodeDelta(cur, snap, 2, DeltaEncoding::kIndices, c + 1,
                           absl::MakeSpan(out)).ok());
}

// A peer's message is checked before any byte is written.
TEST(DeltaCodecTest, MalformedMessagesLeaveTheTargetAlone) {
  auto [snap, cur] = SnapshotAndCurrent(256, 2, 0.05, 5);
  for (DeltaEncoding e : {DeltaEncoding::kIndices, DeltaEncoding::kBitmask}) {
    Bytes good = Encode(cur, snap, 2, e);
    auto expect_refused = [&](Bytes bad, const char* what) {
      Bytes target = snap;
      absl::Status s = ApplyDelta(bad, absl::MakeSpan(target));
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << what << ": " << s;
      EXPECT_EQ(target, snap) << what;
    };
    Bytes b = good;
    b[0] ^= 1;
    expect_refused(b, "magic");
    b = good;
    b[4] = 9;
    expect_refused(b, "encoding");
    b = good;
    b.resize(b.size() - 1);
    expect_refused(b, "truncated");
    b = good;
    uint64_t huge = ~uint64_t{0};
    std::memcpy(b.data() + 16, &huge, 8);  // num_changed
    expect_refused(b, "count");
    if (e == DeltaEncoding::kIndices) {
      b = good;
      uint32_t past = 256;
      std::memcpy(b.data() + sizeof(DeltaHeader), &past, 4);
      expect_refused(b, "index past the end");
      b = good;
      std::memcpy(b.data() + sizeof(DeltaHeader) + 4, b.data() + sizeof(DeltaHeader), 4);
      expect_refused(b, "index repeated");
    } else {
      b = good;
      b[sizeof(DeltaHeader)] ^= 0x80;  // one more or one fewer bit than the count
      expect_refused(b, "bitmask count");
    }
    Bytes wrong_size(snap.size() + 2);
    EXPECT_EQ(ApplyDelta(good, absl::MakeSpan(wrong_size)).code(),
              absl::StatusCode::kDataLoss);
  }
}

}  // namespace
}  // namespace refit
