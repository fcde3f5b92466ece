// The host DeltaWaveOps: a wave's messages counted, encoded and applied in
// one call each (the steps DeltaRunner runs per wave on any memory kind),
// with the codec's bytes, a malformed message refused by name, and digest
// sums per slot.
#include "exec/delta/wave_ops.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "exec/delta/region_digest.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

struct Msg {
  std::vector<uint8_t> cur, snap, target;
  int word = 2;
};

// Messages of several sizes and word sizes, `fraction` of their words
// changed against the snapshot (the engine's target holds the snapshot).
std::vector<Msg> MakeWave(double fraction, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Msg> wave;
  for (int i = 0; i < 7; ++i) {
    Msg m;
    m.word = i % 3 == 0 ? 1 : (i % 3 == 1 ? 2 : 4);
    const int64_t n = (1 + rng() % 5000) * m.word;
    m.snap.resize(n);
    for (auto& b : m.snap) b = static_cast<uint8_t>(rng());
    m.cur = m.snap;
    m.target = m.snap;
    std::bernoulli_distribution pick(i == 3 ? 0.9 : fraction);  // one goes dense
    for (int64_t w = 0; w < n / m.word; ++w) {
      if (pick(rng)) m.cur[w * m.word] ^= static_cast<uint8_t>(1 + rng() % 255);
    }
    wave.push_back(std::move(m));
  }
  return wave;
}

std::vector<EncodeItem> Items(std::vector<Msg>& wave) {
  std::vector<EncodeItem> items;
  for (Msg& m : wave) {
    items.push_back({reinterpret_cast<const char*>(m.cur.data()),
                     reinterpret_cast<const char*>(m.snap.data()),
                     static_cast<int64_t>(m.cur.size()), m.word});
  }
  return items;
}

// Count, choose, Encode: the headers and each payload (dense: the current
// bytes, as the runner sends them).
struct Encoded {
  std::vector<DeltaHeader> headers;
  std::vector<std::vector<char>> payloads;
  std::vector<char> header_bytes;
};

Encoded EncodeWave(DeltaWaveOps& ops, std::vector<Msg>& wave) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::vector<EncodeItem> items = Items(wave);
  absl::StatusOr<std::vector<int64_t>> counts = ops.Count(0, items, deadline);
  EXPECT_TRUE(counts.ok()) << counts.status();
  Encoded e;
  std::vector<char*> out;
  e.payloads.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t n = items[i].bytes / items[i].word_bytes;
    int64_t want = 0;
    for (int64_t w = 0; w < n; ++w) {
      want += std::memcmp(wave[i].cur.data() + w * wave[i].word,
                          wave[i].snap.data() + w * wave[i].word, wave[i].word) != 0;
    }
    EXPECT_EQ((*counts)[i], want) << "message " << i;
    const DeltaEncoding enc = ChooseEncoding(items[i].word_bytes, n, (*counts)[i]);
    DeltaHeader h;
    h.encoding = static_cast<uint8_t>(enc);
    h.word_bytes = static_cast<uint8_t>(items[i].word_bytes);
    h.num_words = n;
    h.num_changed = enc == DeltaEncoding::kDense ? n : (*counts)[i];
    h.payload_bytes = DeltaPayloadBytes(enc, items[i].word_bytes, n, h.num_changed);
    e.headers.push_back(h);
    e.payloads[i].resize(h.payload_bytes);
    out.push_back(enc == DeltaEncoding::kDense ? nullptr : e.payloads[i].data());
    if (enc == DeltaEncoding::kDense) {
      std::memcpy(e.payloads[i].data(), wave[i].cur.data(), wave[i].cur.size());
    }
  }
  e.header_bytes.resize(items.size() * sizeof(DeltaHeader));
  EXPECT_TRUE(ops.Encode(0, items, e.headers, out, e.header_bytes.data(), deadline).ok());
  return e;
}

std::vector<ApplyItem> ApplyItems(std::vector<Msg>& wave, Encoded& e) {
  std::vector<ApplyItem> items;
  for (size_t i = 0; i < wave.size(); ++i) {
    DeltaHeader h;
    std::memcpy(&h, e.header_bytes.data() + i * sizeof(DeltaHeader), sizeof(h));
    items.push_back({h, e.payloads[i].data(), reinterpret_cast<char*>(wave[i].target.data())});
  }
  return items;
}

TEST(HostWaveOpsTest, AWaveOfMessagesLandsInOneCallEach) {
  std::unique_ptr<DeltaWaveOps> ops = MakeHostWaveOps();
  for (double fraction : {0.0, 0.005, 0.02, 0.2}) {
    std::vector<Msg> wave = MakeWave(fraction, 11);
    Encoded e = EncodeWave(*ops, wave);
    EXPECT_EQ(e.headers[3].encoding, static_cast<uint8_t>(DeltaEncoding::kDense));
    std::vector<ApplyItem> items = ApplyItems(wave, e);
    ASSERT_TRUE(ops->Apply(0, items, {}, absl::Now() + absl::Seconds(10)).ok());
    ASSERT_TRUE(ops->Finish(absl::Now() + absl::Seconds(10)).ok());
    for (size_t i = 0; i < wave.size(); ++i) {
      EXPECT_EQ(wave[i].target, wave[i].cur) << "fraction " << fraction << " message " << i;
    }
  }
}

TEST(HostWaveOpsTest, AMalformedMessageIsRefusedByNameAndLeftUnwritten) {
  std::unique_ptr<DeltaWaveOps> ops = MakeHostWaveOps();
  std::vector<Msg> wave = MakeWave(0.01, 12);
  Encoded e = EncodeWave(*ops, wave);
  size_t bad = 0;
  while (e.headers[bad].encoding != static_cast<uint8_t>(DeltaEncoding::kIndices) ||
         e.headers[bad].num_changed == 0) {
    ++bad;
    ASSERT_LT(bad, wave.size());
  }
  const uint32_t past = static_cast<uint32_t>(e.headers[bad].num_words);
  std::memcpy(e.payloads[bad].data(), &past, 4);  // index 0 past the end
  std::vector<ApplyItem> items = ApplyItems(wave, e);
  std::vector<std::string> names;
  for (size_t i = 0; i < wave.size(); ++i) names.push_back("tensor t" + std::to_string(i));
  absl::Status s = ops->Apply(0, items, names, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "tensor t" + std::to_string(bad))) << s;
  EXPECT_EQ(wave[bad].target, wave[bad].snap);
}

TEST(HostWaveOpsTest, DigestsAddUpPerSlot) {
  std::unique_ptr<DeltaWaveOps> ops = MakeHostWaveOps();
  std::vector<uint8_t> a(4096), b(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 13);
  const char* pa = reinterpret_cast<const char*>(a.data());
  const char* pb = reinterpret_cast<const char*>(b.data());
  std::vector<DigestItem> items = {{pa, 2048, 2, PositionKey(1, 0), 0},
                                   {pa + 2048, 2048, 2, PositionKey(1, 2048), 0},
                                   {pb, 1000, 1, PositionKey(2, 0), 1}};
  absl::StatusOr<std::vector<uint64_t>> sums =
      ops->Digest(0, items, 2, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(sums.ok()) << sums.status();
  EXPECT_EQ((*sums)[0], DigestContiguous(pa, 4096, 2, PositionKey(1, 0)));
  EXPECT_EQ((*sums)[1], DigestContiguous(pb, 1000, 1, PositionKey(2, 0)));
  EXPECT_FALSE(ops->Digest(0, items, 1, absl::Now() + absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace refit
