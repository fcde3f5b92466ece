#include "exec/delta/region_digest.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace refit {
namespace {

std::vector<uint16_t> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = static_cast<uint16_t>(rng());
  return v;
}

// The digest byte by byte, as digest_term.h defines it: byte x at key K
// adds x * 2^(8 (K mod 4)) * L((K mod 16) / 4) * H(K - K mod 16).
uint64_t Bytewise(const unsigned char* p, int64_t n, uint64_t key) {
  const uint64_t lanes[4] = {kDigestLane0, kDigestLane1, kDigestLane2, kDigestLane3};
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t k = key + static_cast<uint64_t>(i);
    sum += (static_cast<uint64_t>(p[i]) << (8 * (k % 4))) * lanes[(k % 16) / 4] *
           DigestWeight(k - k % 16);
  }
  return sum;
}

TEST(RegionDigestTest, EqualsTheBytewiseDefinitionAtAnyKeyAndLength) {
  std::mt19937_64 rng(7);
  std::vector<unsigned char> v(4096);
  for (auto& x : v) x = static_cast<unsigned char>(rng());
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t start = static_cast<int64_t>(rng() % 64);
    const int64_t n = static_cast<int64_t>(rng() % 1000);
    const uint64_t key = PositionKey(static_cast<int64_t>(rng() % 9),
                                     static_cast<int64_t>(rng() % 100000));
    EXPECT_EQ(DigestContiguous(v.data() + start, n, 1, key), Bytewise(v.data() + start, n, key))
        << "trial " << trial;
  }
  // A chunk begun before its run's first key, at the start of a buffer's
  // keys (the chunk's first word lies in the previous buffer's range): its
  // bytes before the run are zeros, the rest weighs as the run's.
  for (int d = 1; d < 16; ++d) {
    unsigned char c[16] = {0};
    for (int j = d; j < 16; ++j) c[j] = static_cast<unsigned char>(rng());
    uint64_t lo, hi;
    std::memcpy(&lo, c, 8);
    std::memcpy(&hi, c + 8, 8);
    const uint64_t key = PositionKey(5, 0) - static_cast<uint64_t>(d);
    EXPECT_EQ(DigestChunk(DigestWeight(key), key, lo, hi),
              Bytewise(c + d, 16 - d, PositionKey(5, 0)))
        << "bytes before the run: " << d;
  }
}

TEST(RegionDigestTest, SplitRunsAddUpToTheWhole) {
  auto v = Random(1000, 1);
  const uint64_t key = PositionKey(3, 4096);
  const uint64_t whole = DigestContiguous(v.data(), 2000, 2, key);
  // Any split into parts, digested by different parties, sums to the whole.
  for (int cut : {0, 2, 1000, 1998, 2000}) {
    uint64_t a = DigestContiguous(v.data(), cut, 2, key);
    uint64_t b = DigestContiguous(reinterpret_cast<char*>(v.data()) + cut, 2000 - cut,
                                  2, key + cut);
    EXPECT_EQ(a + b, whole) << "cut at byte " << cut;
  }
}

TEST(RegionDigestTest, OneFlippedBitChangesTheDigest) {
  auto v = Random(4096, 2);
  const uint64_t key = PositionKey(0, 0);
  const uint64_t before = DigestContiguous(v.data(), v.size() * 2, 2, key);
  for (size_t i : {size_t{0}, size_t{17}, size_t{4095}}) {
    for (int bit : {0, 7, 15}) {
      auto w = v;
      w[i] ^= static_cast<uint16_t>(1u << bit);
      EXPECT_NE(DigestContiguous(w.data(), w.size() * 2, 2, key), before)
          << "element " << i << " bit " << bit;
    }
  }
}

TEST(RegionDigestTest, SwappedElementsAndShiftedPlacesChangeTheDigest) {
  std::vector<uint16_t> v = {1, 2, 3, 4};
  std::vector<uint16_t> swapped = {2, 1, 3, 4};
  const uint64_t key = PositionKey(1, 0);
  EXPECT_NE(DigestContiguous(v.data(), 8, 2, key),
            DigestContiguous(swapped.data(), 8, 2, key));
  // The same bytes one element further, or in another buffer.
  EXPECT_NE(DigestContiguous(v.data(), 8, 2, key),
            DigestContiguous(v.data(), 8, 2, key + 2));
  EXPECT_NE(DigestContiguous(v.data(), 8, 2, PositionKey(1, 0)),
            DigestContiguous(v.data(), 8, 2, PositionKey(2, 0)));
}

TEST(RegionDigestTest, PartsCutInsideWordsAddUp) {
  // Bytes, not elements: parts cut at any byte, at any key alignment, add
  // up to the whole, and one changed byte anywhere changes the sum.
  auto v = Random(64, 3);
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (uint64_t key : {PositionKey(2, 0), PositionKey(2, 5), PositionKey(7, 1023)}) {
    const uint64_t whole = DigestContiguous(p, 128, 1, key);
    for (int cut : {1, 3, 7, 9, 15, 17, 100, 127}) {
      EXPECT_EQ(DigestContiguous(p, cut, 1, key) + DigestContiguous(p + cut, 128 - cut, 1, key + cut),
                whole)
          << "cut at byte " << cut;
    }
    std::vector<unsigned char> w(p, p + 128);
    for (int i = 0; i < 128; i += 13) {
      w[i] ^= 0x80;
      EXPECT_NE(DigestContiguous(w.data(), 128, 1, key), whole) << "byte " << i;
      w[i] ^= 0x80;
    }
  }
}

TEST(RegionDigestTest, DigestRunRefusesBadArguments) {
  std::vector<uint16_t> v(8);
  EXPECT_EQ(DigestRun(v.data(), 16, 3, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DigestRun(v.data(), 15, 2, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DigestRun(v.data(), 16, 2, PositionKey(0, kDigestMaxOffset - 7)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto ok = DigestRun(v.data(), 16, 2, PositionKey(0, 64));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, DigestContiguous(v.data(), 16, 2, PositionKey(0, 64)));
  EXPECT_EQ(MakePositionKey(-1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakePositionKey(0, kDigestMaxOffset + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*MakePositionKey(5, 7), PositionKey(5, 7));
}

}  // namespace
}  // namespace refit
