// GPU check of the GPU wave ops (gpu_wave_ops.h): a wave of messages of
// every word size, sizes across tile edges, some dense, counted and encoded
// in one call each, writes the same headers and payload bytes as the host
// ops; applied in one call on the device it restores the current bytes; a
// wave with a malformed message writes nothing and Finish names it; digest
// sums per slot equal the host's; with every mask kernel. Then figures:
// each mask kernel on 1 GiB (32 messages of 32 MiB, BF16, 2% changed) and
// on one 512 MiB batch next to the read floor (a compare that writes
// nothing) and a device copy, the tile scan, the whole count and encode,
// the digest.
// SKIP and REFIT_GPU_SKIP without a device.
#include "exec/delta/cuda/gpu_wave_ops.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "exec/delta/cuda/delta_kernels.h"
#include "exec/delta/region_digest.h"
#include "gtest/gtest.h"
#include "testing/gpu_test.h"
#include "testing/read_floor_kernels.h"

namespace refit {
namespace {

class OneLane : public CudaLanes {
 public:
  OneLane() { cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking); }
  ~OneLane() override { cudaStreamDestroy(s_); }
  int32_t num_lanes() const override { return 1; }
  void* stream(int32_t lane) const override { return lane == 0 ? s_ : nullptr; }
  absl::Status CheckCancelled() override { return absl::OkStatus(); }

 private:
  cudaStream_t s_ = nullptr;
};

using Bytes = std::vector<uint8_t>;
absl::Time Deadline() { return absl::Now() + absl::Seconds(30); }

struct Wave {
  std::vector<Bytes> cur, snap;
  std::vector<int> word;
};

Wave MakeWave(double fraction, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Wave w;
  const int64_t sizes[] = {48, 32768, 32768 * 3 + 4 * 37, 200000, 65536 + 8, 1 << 20, 7000, 40};
  const int words[] = {1, 2, 4, 8};
  for (int i = 0; i < 16; ++i) {
    const int word = words[i % 4];
    const int64_t n = sizes[i % 8] / word * word;
    Bytes snap(n);
    for (auto& b : snap) b = static_cast<uint8_t>(rng());
    Bytes cur = snap;
    std::bernoulli_distribution pick(i == 5 ? 0.97 : fraction);
    for (int64_t k = 0; k < n / word; ++k) {
      const bool edge = (k * word) % 32768 == 0;
      if (pick(rng) || (edge && fraction > 0)) cur[k * word + rng() % word] ^= 1 + rng() % 255;
    }
    w.cur.push_back(cur);
    w.snap.push_back(snap);
    w.word.push_back(word);
  }
  return w;
}

char* Up(const Bytes& b) {
  char* p = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), b.size() + 16), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}
Bytes Down(const char* p, int64_t n) {
  Bytes b(n);
  EXPECT_EQ(cudaMemcpy(b.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
  return b;
}

// Headers for the counts, as the runner chooses them.
std::vector<DeltaHeader> Headers(const std::vector<EncodeItem>& items,
                                 const std::vector<int64_t>& c) {
  std::vector<DeltaHeader> hs;
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t n = items[i].bytes / items[i].word_bytes;
    const DeltaEncoding e = ChooseEncoding(items[i].word_bytes, n, c[i]);
    DeltaHeader h;
    h.encoding = static_cast<uint8_t>(e);
    h.word_bytes = static_cast<uint8_t>(items[i].word_bytes);
    h.num_words = n;
    h.num_changed = e == DeltaEncoding::kDense ? n : c[i];
    h.payload_bytes = DeltaPayloadBytes(e, items[i].word_bytes, n, h.num_changed);
    hs.push_back(h);
  }
  return hs;
}

// A wave's messages encoded by the host ops and by the GPU ops, found equal.
struct Encoded {
  std::vector<DeltaHeader> hs;
  std::vector<Bytes> hout;   // the host's payloads
  std::vector<char*> douts;  // the GPU's (null for dense messages)
};

// Counts and encodes the same messages with `host` (hitems) and `gpu`
// (ditems, at device addresses); expects equal counts, headers and payload
// bytes. Device memory it takes goes to `dev`.
void EncodeOnBoth(DeltaWaveOps& host, DeltaWaveOps& gpu, const std::vector<EncodeItem>& hitems,
                  const std::vector<EncodeItem>& ditems, std::vector<char*>* dev, Encoded* e) {
  absl::StatusOr<std::vector<int64_t>> hc = host.Count(0, hitems, Deadline());
  absl::StatusOr<std::vector<int64_t>> dc = gpu.Count(0, ditems, Deadline());
  ASSERT_TRUE(hc.ok() && dc.ok()) << dc.status();
  ASSERT_EQ(*hc, *dc);
  e->hs = Headers(hitems, *hc);
  e->hout.assign(e->hs.size(), Bytes());
  std::vector<char*> houts;
  for (size_t i = 0; i < e->hs.size(); ++i) {
    e->hout[i].resize(e->hs[i].payload_bytes + 1);
    houts.push_back(e->hs[i].encoding == 0 ? nullptr
                                           : reinterpret_cast<char*>(e->hout[i].data()));
    char* d = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), e->hs[i].payload_bytes + 16),
              cudaSuccess);
    dev->push_back(d);
    e->douts.push_back(e->hs[i].encoding == 0 ? nullptr : d);
  }
  std::vector<char> hhead(e->hs.size() * 32);
  char* dhead = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dhead), e->hs.size() * 32), cudaSuccess);
  dev->push_back(dhead);
  ASSERT_TRUE(host.Encode(0, hitems, e->hs, houts, hhead.data(), Deadline()).ok());
  ASSERT_TRUE(gpu.Encode(0, ditems, e->hs, e->douts, dhead, Deadline()).ok());
  ASSERT_TRUE(gpu.Sync(0, Deadline()).ok());
  ASSERT_EQ(Down(dhead, e->hs.size() * 32), Bytes(hhead.begin(), hhead.end()));
  for (size_t i = 0; i < e->hs.size(); ++i) {
    if (e->hs[i].encoding == 0) continue;
    Bytes got = Down(e->douts[i], e->hs[i].payload_bytes);
    ASSERT_EQ(0, std::memcmp(got.data(), e->hout[i].data(), got.size())) << "message " << i;
  }
}

// Applies e's messages on the GPU to device copies of snap[i] (`targets`,
// with `apply` as given to the ops) and expects cur[i] there afterwards.
void ApplyAndExpectCurrent(DeltaWaveOps& gpu, const Encoded& e, const std::vector<Bytes>& snap,
                           const std::vector<Bytes>& cur, std::vector<char*>* dev,
                           std::vector<ApplyItem>* apply,
                           std::vector<std::pair<size_t, char*>>* targets) {
  for (size_t i = 0; i < e.hs.size(); ++i) {
    if (e.hs[i].encoding == 0) continue;
    char* t = Up(snap[i]);
    dev->push_back(t);
    targets->push_back({i, t});
    apply->push_back({e.hs[i], e.douts[i], t});
  }
  ASSERT_TRUE(gpu.Apply(0, *apply, {}, Deadline()).ok());
  ASSERT_TRUE(gpu.Finish(Deadline()).ok());
  for (const auto& [i, t] : *targets) {
    EXPECT_EQ(Down(t, cur[i].size()), cur[i]) << "message " << i;
  }
}

TEST(GpuWaveOpsTest, AWaveEncodesAsTheHostAndApplies) {
  REFIT_SKIP_WITHOUT_GPU("gpu_wave_ops_test");
  OneLane lane;
  absl::StatusOr<std::unique_ptr<DeltaWaveOps>> gpu = MakeGpuWaveOps(&lane);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::unique_ptr<DeltaWaveOps> host = MakeHostWaveOps();
  // 5% and 10%: tiles whose changed words outgrow the index slot but not
  // the value slot (1- and 2-byte words), and 8-byte tiles past their value
  // slot's 512 words: their masks are written by the mask pass, partly
  // from the slot's indices.
  for (double fraction : {0.0, 0.003, 0.02, 0.05, 0.1, 0.2}) {
    SCOPED_TRACE(fraction);
    Wave w = MakeWave(fraction, 5);
    std::vector<EncodeItem> hitems, ditems;
    std::vector<char*> dev;
    for (size_t i = 0; i < w.cur.size(); ++i) {
      const int64_t n = static_cast<int64_t>(w.cur[i].size());
      hitems.push_back({reinterpret_cast<const char*>(w.cur[i].data()),
                        reinterpret_cast<const char*>(w.snap[i].data()), n, w.word[i]});
      char* c = Up(w.cur[i]);
      char* s = Up(w.snap[i]);
      dev.push_back(c);
      dev.push_back(s);
      ditems.push_back({c, s, n, w.word[i]});
    }
    Encoded e;
    ASSERT_NO_FATAL_FAILURE(EncodeOnBoth(*host, **gpu, hitems, ditems, &dev, &e));
    const std::vector<DeltaHeader>& hs = e.hs;
    const std::vector<char*>& douts = e.douts;
    std::vector<ApplyItem> apply;
    std::vector<std::pair<size_t, char*>> targets;
    ASSERT_NO_FATAL_FAILURE(
        ApplyAndExpectCurrent(**gpu, e, w.snap, w.cur, &dev, &apply, &targets));
    // One malformed message: nothing of the wave is written. At 2%: an
    // index past the end; at 20%: a bitmask marking one word more than
    // its count.
    if (fraction == 0.02 || fraction == 0.2) {
      const uint8_t want = fraction == 0.02 ? 1 : 2;
      size_t bad = 0;
      while (bad < hs.size() && (hs[bad].encoding != want || hs[bad].num_changed == 0 ||
                                 hs[bad].num_changed == hs[bad].num_words)) {
        ++bad;
      }
      ASSERT_LT(bad, hs.size());
      if (want == 1) {
        const uint32_t past = static_cast<uint32_t>(hs[bad].num_words);
        ASSERT_EQ(cudaMemcpy(douts[bad], &past, 4, cudaMemcpyHostToDevice), cudaSuccess);
      } else {
        Bytes mask = Down(douts[bad], (hs[bad].num_words + 7) / 8);
        size_t k0 = 0;
        while (mask[k0 / 8] & (1u << (k0 % 8))) ++k0;  // a word not marked
        mask[k0 / 8] |= static_cast<uint8_t>(1u << (k0 % 8));
        ASSERT_EQ(cudaMemcpy(douts[bad], mask.data(), mask.size(), cudaMemcpyHostToDevice),
                  cudaSuccess);
      }
      std::vector<std::string> names;
      for (const auto& [i, t] : targets) {
        ASSERT_EQ(cudaMemcpy(t, w.snap[i].data(), w.snap[i].size(), cudaMemcpyHostToDevice),
                  cudaSuccess);
        names.push_back("tensor t" + std::to_string(i));
      }
      ASSERT_TRUE((*gpu)->Apply(0, apply, names, Deadline()).ok());
      absl::Status s = (*gpu)->Finish(Deadline());
      ASSERT_TRUE(absl::IsDataLoss(s)) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "tensor t" + std::to_string(bad))) << s;
      for (const auto& [i, t] : targets) {
        EXPECT_EQ(Down(t, w.snap[i].size()), w.snap[i]) << "message " << i;
      }
    }
    // Digests per slot, as the host sums them.
    std::vector<DigestItem> dig, hdig;
    for (size_t i = 0; i < w.cur.size(); ++i) {
      const int64_t n = static_cast<int64_t>(w.cur[i].size());
      const int32_t slot = static_cast<int32_t>(i % 3);
      dig.push_back({ditems[i].cur, n, w.word[i], PositionKey(static_cast<int64_t>(i), 8), slot});
      hdig.push_back({hitems[i].cur, n, w.word[i], PositionKey(static_cast<int64_t>(i), 8), slot});
    }
    absl::StatusOr<std::vector<uint64_t>> ds = (*gpu)->Digest(0, dig, 3, Deadline());
    absl::StatusOr<std::vector<uint64_t>> hsum = host->Digest(0, hdig, 3, Deadline());
    ASSERT_TRUE(ds.ok() && hsum.ok()) << ds.status();
    EXPECT_EQ(*ds, *hsum);
    for (char* p : dev) cudaFree(p);
  }
}

// The one-pass mask kernel on many messages of every size (none, less than
// a tile, across tile edges), word size and alignment (current bytes at
// any word-aligned address): the same headers and payload bytes as the
// host ops, applied on the device it gives the
// current bytes back, and the digest of the same runs equals the host's:
// both digested by the count (runs cut anywhere in a message, several
// slots a message, messages without a snapshot) and on their own.
TEST(GpuWaveOpsTest, ManyMessagesAtAnyAlignmentEncodeAsTheHost) {
  REFIT_SKIP_WITHOUT_GPU("gpu_wave_ops_test");
  std::unique_ptr<DeltaWaveOps> host = MakeHostWaveOps();
  std::mt19937_64 rng(11);
  for (double fraction : {0.02, 0.2}) {
    SCOPED_TRACE(::testing::Message() << "fraction " << fraction);
    OneLane lane;
    absl::StatusOr<std::unique_ptr<DeltaWaveOps>> gpu = MakeGpuWaveOps(&lane);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const int kMessages = 150;
    std::vector<Bytes> cur(kMessages), snap(kMessages);
    std::vector<EncodeItem> hitems, ditems;
    std::vector<char*> dev;
    // Per message, its digest runs in the count (host and device).
    std::vector<std::vector<DigestItem>> hruns(kMessages), druns(kMessages);
    for (int i = 0; i < kMessages; ++i) {
      const int word = 1 << (rng() % 4);
      const int64_t sizes[] = {0, 40, 32768, 32768 * 4 + 24, int64_t(rng() % 300000)};
      const int64_t n = sizes[rng() % 5] / word * word;
      snap[i].resize(n);
      for (auto& x : snap[i]) x = static_cast<uint8_t>(rng());
      cur[i] = snap[i];
      std::bernoulli_distribution pick(fraction);
      for (int64_t k = 0; k < n / word; ++k) {
        if (pick(rng)) cur[i][k * word + rng() % word] ^= 1 + rng() % 255;
      }
      hitems.push_back({reinterpret_cast<const char*>(cur[i].data()),
                        reinterpret_cast<const char*>(snap[i].data()), n, word});
      // The current bytes at a word-aligned, mostly not 16-aligned place.
      const int64_t shift = (rng() % 16) / word * word;
      char* c = nullptr;
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&c), n + 32), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(c + shift, cur[i].data(), n, cudaMemcpyHostToDevice), cudaSuccess);
      char* sp = Up(snap[i]);
      dev.push_back(c);
      dev.push_back(sp);
      ditems.push_back({c + shift, sp, n, word});
      // Every 9th message without a snapshot (dense); runs of whole words
      // cut at random places (a gap left between some), slots at random.
      if (i % 9 == 4) hitems.back().snap = ditems.back().snap = nullptr;
      int64_t at = 0;
      if (i % 3 == 0) {  // one run from a 16-byte word's key: the count digests it
        const uint64_t key = PositionKey(i % 5, 16 * static_cast<int64_t>(rng() % 5000));
        const int slot = static_cast<int>(rng() % 7);
        hruns[i].push_back({hitems.back().cur, n, word, key, slot});
        druns[i].push_back({ditems.back().cur, n, word, key, slot});
        at = n;
      }
      while (at < n) {
        const int64_t len = std::min<int64_t>(n - at, (1 + rng() % 40000) * word);
        const uint64_t key = PositionKey(i % 5, static_cast<int64_t>(rng() % 100000));
        const int slot = static_cast<int>(rng() % 7);
        hruns[i].push_back({hitems.back().cur + at, len, word, key, slot});
        druns[i].push_back({ditems.back().cur + at, len, word, key, slot});
        at += len + (rng() % 4 == 0 ? word * static_cast<int64_t>(rng() % 9) : 0);
      }
      hitems.back().digest = hruns[i];
      ditems.back().digest = druns[i];
    }
    ASSERT_TRUE(host->StartDigests(7).ok());
    ASSERT_TRUE((*gpu)->StartDigests(7).ok());
    Encoded e;
    ASSERT_NO_FATAL_FAILURE(EncodeOnBoth(*host, **gpu, hitems, ditems, &dev, &e));
    absl::StatusOr<std::vector<uint64_t>> hcounted = host->TakeDigests(Deadline());
    absl::StatusOr<std::vector<uint64_t>> dcounted = (*gpu)->TakeDigests(Deadline());
    ASSERT_TRUE(hcounted.ok() && dcounted.ok()) << dcounted.status();
    EXPECT_EQ(*dcounted, *hcounted) << "digests of the count";
    std::vector<ApplyItem> apply;
    std::vector<std::pair<size_t, char*>> targets;
    ASSERT_NO_FATAL_FAILURE(ApplyAndExpectCurrent(**gpu, e, snap, cur, &dev, &apply, &targets));
    // The digest of the same runs (any key, any alignment) into 7 slots.
    std::vector<DigestItem> dig, hdig;
    for (int i = 0; i < kMessages; ++i) {
      const uint64_t key = PositionKey(i, static_cast<int64_t>(rng() % 1000));
      dig.push_back({ditems[i].cur, ditems[i].bytes, ditems[i].word_bytes, key, i % 7});
      hdig.push_back({hitems[i].cur, hitems[i].bytes, hitems[i].word_bytes, key, i % 7});
    }
    absl::StatusOr<std::vector<uint64_t>> ds = (*gpu)->Digest(0, dig, 7, Deadline());
    absl::StatusOr<std::vector<uint64_t>> hsum = host->Digest(0, hdig, 7, Deadline());
    ASSERT_TRUE(ds.ok() && hsum.ok()) << ds.status();
    EXPECT_EQ(*ds, *hsum);
    for (char* p : dev) cudaFree(p);
  }
}

// kMaxCountsInFlight waves' counts started on one lane before the first is
// finished: each finishes and encodes, in order, to the host's bytes; one more
// in flight is refused.
TEST(GpuWaveOpsTest, CountsInFlightFinishInOrder) {
  REFIT_SKIP_WITHOUT_GPU("gpu_wave_ops_test");
  OneLane lane;
  absl::StatusOr<std::unique_ptr<DeltaWaveOps>> gpu = MakeGpuWaveOps(&lane);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::unique_ptr<DeltaWaveOps> host = MakeHostWaveOps();
  std::vector<Wave> waves;
  std::vector<std::vector<EncodeItem>> hitems(kMaxCountsInFlight), ditems(kMaxCountsInFlight);
  std::vector<char*> dev;
  for (int k = 0; k < kMaxCountsInFlight; ++k) {
    waves.push_back(MakeWave(k % 2 == 0 ? 0.02 : 0.2, 20 + k));
    const Wave& w = waves.back();
    for (size_t i = 0; i < w.cur.size(); ++i) {
      const int64_t n = static_cast<int64_t>(w.cur[i].size());
      hitems[k].push_back({reinterpret_cast<const char*>(w.cur[i].data()),
                           reinterpret_cast<const char*>(w.snap[i].data()), n, w.word[i]});
      char* c = Up(w.cur[i]);
      char* sp = Up(w.snap[i]);
      dev.push_back(c);
      dev.push_back(sp);
      ditems[k].push_back({c, sp, n, w.word[i]});
    }
    ASSERT_TRUE((*gpu)->StartCount(0, ditems[k], Deadline()).ok()) << "wave " << k;
  }
  absl::Status one_more = (*gpu)->StartCount(0, ditems[0], Deadline());
  EXPECT_TRUE(absl::IsFailedPrecondition(one_more)) << one_more;
  for (int k = 0; k < kMaxCountsInFlight; ++k) {
    SCOPED_TRACE(k);
    absl::StatusOr<std::vector<int64_t>> hc = host->Count(0, hitems[k], Deadline());
    absl::StatusOr<std::vector<int64_t>> dc = (*gpu)->FinishCount(0, Deadline());
    ASSERT_TRUE(hc.ok() && dc.ok()) << dc.status();
    ASSERT_EQ(*hc, *dc);
    std::vector<DeltaHeader> hs = Headers(hitems[k], *hc);
    std::vector<Bytes> hout(hs.size());
    std::vector<char*> houts, douts;
    for (size_t i = 0; i < hs.size(); ++i) {
      hout[i].resize(hs[i].payload_bytes + 1);
      houts.push_back(hs[i].encoding == 0 ? nullptr : reinterpret_cast<char*>(hout[i].data()));
      char* d = nullptr;
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), hs[i].payload_bytes + 16), cudaSuccess);
      dev.push_back(d);
      douts.push_back(hs[i].encoding == 0 ? nullptr : d);
    }
    std::vector<char> hhead(hs.size() * 32);
    char* dhead = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dhead), hs.size() * 32), cudaSuccess);
    dev.push_back(dhead);
    ASSERT_TRUE(host->Encode(0, hitems[k], hs, houts, hhead.data(), Deadline()).ok());
    ASSERT_TRUE((*gpu)->Encode(0, ditems[k], hs, douts, dhead, Deadline()).ok());
    ASSERT_TRUE((*gpu)->Sync(0, Deadline()).ok());
    ASSERT_EQ(Down(dhead, hs.size() * 32), Bytes(hhead.begin(), hhead.end()));
    for (size_t i = 0; i < hs.size(); ++i) {
      if (hs[i].encoding == 0) continue;
      Bytes got = Down(douts[i], hs[i].payload_bytes);
      ASSERT_EQ(0, std::memcmp(got.data(), hout[i].data(), got.size())) << "message " << i;
    }
  }
  EXPECT_FALSE((*gpu)->FinishCount(0, Deadline()).ok());  // none left
  ASSERT_TRUE((*gpu)->Finish(Deadline()).ok());
  for (char* p : dev) cudaFree(p);
}

// The mask kernel alone (the encoder's one read of current and snapshot)
// on 1 GiB in 32 messages and on one 512 MiB batch, BF16, 2% changed, next
// to a compare that writes nothing (the read floor) and a device copy;
// then the whole count and encode through the ops, as a round waits for
// it, and the digest.
TEST(GpuWaveOpsTest, Figure) {
  REFIT_SKIP_WITHOUT_GPU("gpu_wave_ops_test");
  OneLane lane;
  const int64_t each = int64_t{32} << 20, count = 32, total = each * count;
  const int64_t tiles = total / kDeltaTileBytes;
  char *cur = nullptr, *snap = nullptr, *out = nullptr, *head = nullptr, *scratch = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&cur), total), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&snap), total), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), total), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&head), count * 32), cudaSuccess);
  // Mask, values, indices, tile counts, totals.
  const int64_t scratch_bytes =
      tiles * (kWaveMaskWordsPerTile * 4 + kWaveValueBytesPerTile + kWaveIndexSlots * 4 + 4) +
      count * 8;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scratch), scratch_bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(snap, 0, total), cudaSuccess);
  // 2% of the BF16 words changed, at random.
  std::mt19937_64 rng(3);
  Bytes row(each, 0);
  uint64_t host_changed_half = 0;  // changed words of the first 16 messages
  for (int64_t m = 0; m < count; ++m) {
    std::fill(row.begin(), row.end(), 0);
    for (int64_t k = 0; k < each / 2; ++k) {
      if (rng() % 50 == 0) {
        row[k * 2] = 1;
        if (m < count / 2) ++host_changed_half;
      }
    }
    ASSERT_EQ(cudaMemcpy(cur + m * each, row.data(), each, cudaMemcpyHostToDevice), cudaSuccess);
  }
  auto* mask = reinterpret_cast<uint32_t*>(scratch);
  auto* vals = reinterpret_cast<uint8_t*>(mask + tiles * kWaveMaskWordsPerTile);
  auto* idx = reinterpret_cast<uint32_t*>(vals + tiles * kWaveValueBytesPerTile);
  auto* tile_counts = idx + tiles * kWaveIndexSlots;
  auto* totals = reinterpret_cast<uint64_t*>(tile_counts + tiles);
  std::vector<WaveMsg> msgs(count);
  for (int64_t m = 0; m < count; ++m) {
    msgs[m].cur = reinterpret_cast<const uint8_t*>(cur + m * each);
    msgs[m].snap = reinterpret_cast<const uint8_t*>(snap + m * each);
    msgs[m].bytes = each;
    msgs[m].word = 2;
    msgs[m].first_tile = m * (each / kDeltaTileBytes);
  }
  unsigned long long* diff = reinterpret_cast<unsigned long long*>(totals);
  unsigned long long* claim = nullptr;  // the sweep's tile claims and warps done
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&claim), 16), cudaSuccess);
  uint64_t* host_totals = nullptr;  // the totals, written by the kernel
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&host_totals), count * 8), cudaSuccess);
  const float floor_ms = testing::BestMs([&] {
    testing::LaunchCompareChunks(reinterpret_cast<const uint8_t*>(cur),
                                 reinterpret_cast<const uint8_t*>(snap), total, diff, nullptr);
  });
  const float copy_ms =
      testing::BestMs([&] { cudaMemcpyAsync(out, cur, total, cudaMemcpyDeviceToDevice); });
  const double floor_gbps = 2.0 * total / (floor_ms * 1e-3) / 1e9;
  std::printf("FIGURE read floor (compare, nothing written): 1 GiB each side: %.3f ms, %.0f GB/s "
              "read; device copy of 1 GiB %.3f ms, %.0f GB/s read + as much written\n",
              floor_ms, floor_gbps, copy_ms, total / (copy_ms * 1e-3) / 1e9);
  std::fflush(stdout);
  {
    const int blocks = WaveMaskBlocks(0);
    double gbps[2] = {0, 0};
    float ms[2] = {0, 0};
    for (int half = 0; half < 2; ++half) {
      const int32_t nm = half == 0 ? count : count / 2;
      const int64_t nt = half == 0 ? tiles : tiles / 2;
      const WaveRows rows = InlineWaveRows(msgs.data(), nm);
      ms[half] = testing::BestMs([&] {
        cudaMemsetAsync(totals, 0, count * 8);
        cudaMemsetAsync(claim, 0, 16);
        LaunchWaveMask(rows, nt, {mask, tile_counts, vals, idx, totals, claim, host_totals},
                       nullptr);
      });
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      gbps[half] = 2.0 * (total / (half + 1)) / (ms[half] * 1e-3) / 1e9;
    }
    // The 512 MiB batch's changed words, counted by the host.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    uint64_t sum = 0;
    for (int64_t m = 0; m < count / 2; ++m) sum += host_totals[m];
    EXPECT_EQ(sum, host_changed_half);
    std::printf("FIGURE mask pass, %d blocks: 1 GiB %.3f ms, %.0f GB/s read, %.2f of the "
                "floor; 512 MiB batch %.3f ms, %.0f GB/s, %.2f of the floor\n",
                blocks, ms[0], gbps[0], gbps[0] / floor_gbps, ms[1], gbps[1],
                gbps[1] / floor_gbps);
    // The tiles' offsets, scanned while the host builds the headers.
    uint64_t* offsets = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&offsets), tiles * 8 + 8), cudaSuccess);
    const float scan_ms = testing::BestMs(
        [&] { LaunchTileScan(tile_counts, tiles, offsets, offsets + tiles, nullptr); });
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    uint64_t scanned = 0;
    ASSERT_EQ(cudaMemcpy(&scanned, offsets + tiles / 2, 8, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(scanned, host_changed_half);  // the first 16 messages' tiles
    cudaFree(offsets);
    std::printf("FIGURE tile scan of %lld tiles (the gather waits for it): %.4f ms\n",
                static_cast<long long>(tiles), scan_ms);
    std::fflush(stdout);
  }
  // The kernel digesting the current bytes in the same pass (one run a
  // message), as a verified round's count does.
  {
    std::vector<WaveMsg> with = msgs;
    for (int64_t m = 0; m < count; ++m) {
      with[m].digest_slot = static_cast<int32_t>(m % 3);
      with[m].digest_key = PositionKey(m, 0);
    }
    char* extra = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&extra), 64), cudaSuccess);
    auto* dsums = reinterpret_cast<unsigned long long*>(extra);
    const WaveRows rows = InlineWaveRows(with.data(), count);
    const float ms = testing::BestMs([&] {
      cudaMemsetAsync(totals, 0, count * 8);
      cudaMemsetAsync(claim, 0, 16);
      LaunchWaveMask(rows, tiles, {mask, tile_counts, vals, idx, totals, claim, host_totals},
                     nullptr, dsums);
    });
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    const double gbps = 2.0 * total / (ms * 1e-3) / 1e9;
    std::printf("FIGURE mask pass with the digest, %d blocks: 1 GiB %.3f ms, %.0f GB/s "
                "read, %.2f of the floor\n",
                WaveMaskBlocks(0, true), ms, gbps, gbps / floor_gbps);
    std::fflush(stdout);
    cudaFree(extra);
  }
  // The whole count and encode through the ops (default options), as the
  // round's host thread waits for them.
  std::vector<EncodeItem> items;
  for (int64_t m = 0; m < count; ++m) items.push_back({cur + m * each, snap + m * each, each, 2});
  auto stream = static_cast<cudaStream_t>(lane.stream(0));
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  std::unique_ptr<DeltaWaveOps> gpu = *MakeGpuWaveOps(&lane);
  {
    // One warm-up, then kEncodeRuns timed: the median is the figure.
    constexpr int kEncodeRuns = 11;
    std::vector<double> all, counts, kernels;
    for (int iter = 0; iter <= kEncodeRuns; ++iter) {
      gpu->TakeTimes();  // this encode's windows only
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<int64_t> c = *gpu->Count(0, items, Deadline());
      const double counted = since(t0);
      std::vector<DeltaHeader> hs = Headers(items, c);
      std::vector<char*> outs;
      int64_t at = 0;
      for (const DeltaHeader& h : hs) {
        outs.push_back(out + at);
        at += (h.payload_bytes + 15) / 16 * 16;
      }
      ASSERT_TRUE(gpu->Encode(0, items, hs, outs, head, Deadline()).ok());
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const double wall = since(t0);
      ASSERT_TRUE(gpu->Finish(Deadline()).ok());  // times the gather's window
      const WaveOpsTimes t = gpu->TakeTimes();
      if (iter == 0) continue;
      all.push_back(wall);
      counts.push_back(counted);
      ASSERT_EQ(t.count_windows.size(), 1u);
      kernels.push_back(t.count_windows[0].second - t.count_windows[0].first + t.encode_seconds);
    }
    std::sort(all.begin(), all.end());
    std::sort(counts.begin(), counts.end());
    const double med = all[all.size() / 2], best = all.front();
    std::printf("FIGURE wave encode: 1 GiB in 32 messages, BF16, 2%% changed, median of %d: "
                "%.3f ms (count %.3f ms; best %.3f ms), %.0f GB/s read (current + snapshot), "
                "%.2f of the read floor (best run %.2f)\n",
                kEncodeRuns, med * 1e3, counts[counts.size() / 2] * 1e3, best * 1e3,
                2.0 * total / med / 1e9, 2.0 * total / med / 1e9 / floor_gbps,
                2.0 * total / best / 1e9 / floor_gbps);
    // The same encodes on the device's clock: the count pass's window and
    // the gather's (its uploads and kernel), without the host's part
    // between them (the totals' way up, the headers).
    std::sort(kernels.begin(), kernels.end());
    const double kmed = kernels[kernels.size() / 2];
    std::printf("FIGURE wave encode, device time of its kernels (count pass + gather), median "
                "of %d: %.3f ms, %.2f of the read floor; the host's part between them %.3f ms\n",
                kEncodeRuns, kmed * 1e3, 2.0 * total / kmed / 1e9 / floor_gbps,
                (med - kmed) * 1e3);
    std::fflush(stdout);
  }
  // The digest of the same 1 GiB (one run).
  double dbest = 1e9;
  std::vector<DigestItem> one = {{cur, total, 2, PositionKey(0, 0), 0}};
  for (int iter = 0; iter < 4; ++iter) {
    const auto t1 = std::chrono::steady_clock::now();
    ASSERT_TRUE(gpu->Digest(0, one, 1, Deadline()).ok());
    dbest = std::min(dbest, since(t1));
  }
  std::printf("FIGURE wave digest: 1 GiB: %.3f ms, %.0f GB/s read\n", dbest * 1e3,
              total / dbest / 1e9);
  std::fflush(stdout);
  cudaFree(cur);
  cudaFree(snap);
  cudaFree(out);
  cudaFree(head);
  cudaFree(scratch);
  cudaFree(claim);
  cudaFreeHost(host_totals);
}

}  // namespace
}  // namespace refit
