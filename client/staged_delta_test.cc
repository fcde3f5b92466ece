// StagedDeltaLog on a host member: a delta round applied into staging (one
// message in place, one through the runner's own staging and unpacked into
// its buffer, one unchanged) and then replayed into the live buffers leaves
// every live byte equal to the dense apply of the same round; a round that
// aborts before its apply leaves the live bytes at the previous version.
#include "client/staged_delta.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <algorithm>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "client/staged_buffers.h"
#include "exec/delta/delta_codec.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

constexpr int kWord = 2;  // BF16
const std::vector<int64_t> kBytes = {4096, 1000, 64};

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Version `v` of buffer b: version 1 is a fixed pattern; version 2 changes
// about 2% of its words at uniformly random places plus one whole row of
// 64 words of buffer 0, and none of buffer 2.
std::string Version(size_t b, int v) {
  std::string s(static_cast<size_t>(kBytes[b]), '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(Mix(b * 100000 + i));
  if (v == 1 || b == 2) return s;
  for (size_t w = 0; w < s.size() / kWord; ++w) {
    const bool row = b == 0 && w >= 640 && w < 704;
    if (row || Mix(7 + b * 100000 + w) % 50 == 0) s[w * kWord] ^= 0x5A;
  }
  return s;
}

// Buffer 1's bytes as the runner's own staging holds them: halves swapped.
std::string Swapped(const std::string& s) { return s.substr(500) + s.substr(0, 500); }

// The codec's message from `prev` to `next`, in `e`.
struct Message {
  DeltaHeader header;
  std::vector<uint8_t> payload;
};
Message Encode(const std::string& prev, const std::string& next, DeltaEncoding e) {
  absl::Span<const uint8_t> cur(reinterpret_cast<const uint8_t*>(next.data()), next.size());
  absl::Span<const uint8_t> old(reinterpret_cast<const uint8_t*>(prev.data()), prev.size());
  const int64_t changed = CountChangedWords(cur, old, kWord);
  Message m;
  m.payload.resize(static_cast<size_t>(
      std::max<int64_t>(DeltaPayloadBytes(e, kWord, next.size() / kWord, changed), 1)));
  absl::StatusOr<DeltaHeader> h =
      EncodeDeltaPayload(cur, old, kWord, e, changed, absl::MakeSpan(m.payload));
  EXPECT_TRUE(h.ok()) << h.status();
  if (h.ok()) m.header = *h;
  return m;
}

// Live buffers at version 1 and their staging.
struct Engine {
  std::vector<std::string> live;
  std::unique_ptr<StagedBuffers> staged;
};
Engine Start() {
  Engine e;
  std::vector<char*> ptrs;
  for (size_t b = 0; b < kBytes.size(); ++b) e.live.push_back(Version(b, 1));
  for (std::string& s : e.live) ptrs.push_back(s.data());
  auto st = StagedBuffers::Create(ptrs, kBytes, HostStagingMemory(), -1,
                                  absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(st.ok()) << st.status();
  if (st.ok()) e.staged = *std::move(st);
  return e;
}

// What the member's delta runner does with round 2 through the log's
// wrappers: buffer 0's message (indices) applied in place in staging;
// buffer 1's (bitmask) applied into the runner's own copy of version 1
// and unpacked into staging in two rows, the second half first; buffer
// 2's (nothing changed) in place.
void Receive(Engine* e, StagedDeltaLog* log, std::string* runner_copy) {
  const std::vector<char*>& st = e->staged->staging();
  Message m0 = Encode(Version(0, 1), Version(0, 2), DeltaEncoding::kIndices);
  Message m1 = Encode(Swapped(Version(1, 1)), Swapped(Version(1, 2)), DeltaEncoding::kBitmask);
  Message m2 = Encode(Version(2, 1), Version(2, 2), DeltaEncoding::kIndices);
  ASSERT_EQ(m2.header.num_changed, 0u);
  *runner_copy = Swapped(Version(1, 1));
  const std::vector<ApplyItem> items = {
      {m0.header, reinterpret_cast<const char*>(m0.payload.data()), st[0]},
      {m1.header, reinterpret_cast<const char*>(m1.payload.data()), runner_copy->data()},
      {m2.header, reinterpret_cast<const char*>(m2.payload.data()), st[2]}};
  log->OnApply(items);
  for (const ApplyItem& it : items) {
    const int64_t n = static_cast<int64_t>(it.header.num_words) * it.header.word_bytes;
    ASSERT_TRUE(ApplyDeltaPayload(it.header,
                                  absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(it.payload),
                                                      it.header.payload_bytes),
                                  absl::MakeSpan(reinterpret_cast<uint8_t*>(it.target), n))
                    .ok());
  }
  // The runner's unpack of buffer 1 into staging, the second half first.
  const std::vector<ResolvedCopy> unpack = {{runner_copy->data() + 500, st[1], 1, 500, 500, 500},
                                            {runner_copy->data(), st[1] + 500, 1, 500, 500, 500}};
  log->OnCopy(unpack);
  for (const ResolvedCopy& c : unpack) std::memcpy(c.dst, c.src, c.row_bytes);
}

TEST(StagedDeltaTest, TheReplayedApplyLeavesTheBytesOfTheDenseApply) {
  Engine replayed = Start(), dense = Start();
  StagedDeltaLog log;
  std::string runner_copy;
  Receive(&replayed, &log, &runner_copy);
  for (size_t b = 0; b < kBytes.size(); ++b) {
    EXPECT_EQ(replayed.live[b], Version(b, 1)) << "buffer " << b << " changed before the apply";
    std::string next = Version(b, 2);
    std::memcpy(dense.staged->staging()[b], next.data(), next.size());
  }
  ASSERT_TRUE(dense.staged->Apply(absl::Now() + absl::Seconds(10)).ok());
  absl::StatusOr<int64_t> words = log.ApplyToLive(
      replayed.staged->staging(), replayed.staged->live(), replayed.staged->bytes());
  ASSERT_TRUE(words.ok()) << words.status();
  int64_t changed = 0;
  for (size_t b = 0; b < kBytes.size(); ++b) {
    EXPECT_EQ(replayed.live[b], dense.live[b]) << "buffer " << b;
    EXPECT_EQ(dense.live[b], Version(b, 2)) << "buffer " << b;
    for (int64_t i = 0; i < kBytes[b]; ++i) changed += Version(b, 1)[i] != Version(b, 2)[i];
  }
  EXPECT_GT(changed, 64);
  EXPECT_EQ(*words, changed);  // each changed word differs in one byte
}

TEST(StagedDeltaTest, AnAbortBeforeTheApplyLeavesTheLiveBytes) {
  Engine e = Start();
  StagedDeltaLog log;
  std::string runner_copy;
  Receive(&e, &log, &runner_copy);
  // The round aborts: staging is reset from live and the log cleared.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(e.staged->Reset(deadline).ok());
  log.Clear();
  for (size_t b = 0; b < kBytes.size(); ++b) {
    EXPECT_EQ(e.live[b], Version(b, 1)) << "buffer " << b;
    EXPECT_EQ(std::string(e.staged->staging()[b], kBytes[b]), Version(b, 1)) << "buffer " << b;
  }
  // The round again, then its apply: version 2 everywhere.
  Receive(&e, &log, &runner_copy);
  ASSERT_TRUE(log.ApplyToLive(e.staged->staging(), e.staged->live(), e.staged->bytes()).ok());
  for (size_t b = 0; b < kBytes.size(); ++b) EXPECT_EQ(e.live[b], Version(b, 2)) << "buffer " << b;
}

}  // namespace
}  // namespace refit
