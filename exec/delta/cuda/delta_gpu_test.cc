// GPU check of exec/delta/cuda: the device encoder writes the same bytes as
// the host codec (every encoding, 1- and 2-byte words, odd sizes, changes
// at random and at tile edges), applying on the device restores the current
// bytes, malformed messages are refused with the target untouched, and the
// device digest equals the host's. Then figures: the encoder (count and
// gather) on 1 GiB of BF16 with 2% of words changed next to a device copy of
// the same bytes, the apply, and the digest. With no CUDA device it prints
// SKIP and REFIT_GPU_SKIP and exits 0.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "exec/delta/cuda/gpu_delta.h"
#include "exec/delta/delta_codec.h"
#include "exec/delta/region_digest.h"
#include "gtest/gtest.h"
#include "testing/gpu_test.h"

namespace refit {
namespace {

using Bytes = std::vector<uint8_t>;

struct Dev {
  explicit Dev(int64_t n) : size(n) { EXPECT_EQ(cudaMalloc(&p, n > 0 ? n : 1), cudaSuccess); }
  ~Dev() { cudaFree(p); }
  void Put(const Bytes& b) { ASSERT_EQ(cudaMemcpy(p, b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess); }
  Bytes Get(int64_t n) const {
    Bytes b(n);
    EXPECT_EQ(cudaMemcpy(b.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
    return b;
  }
  void* p = nullptr;
  int64_t size;
};

// A snapshot and a copy with about `fraction` of words changed, plus words
// changed at both edges of every 32 KiB tile.
std::pair<Bytes, Bytes> Versions(int64_t bytes, int w, double fraction, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes snap(bytes);
  for (auto& b : snap) b = static_cast<uint8_t>(rng());
  Bytes cur = snap;
  std::bernoulli_distribution change(fraction);
  for (int64_t i = 0; i < bytes / w; ++i) {
    const bool edge = (i * w) % 32768 == 0 || ((i + 1) * w) % 32768 == 0;
    if (change(rng) || (edge && fraction > 0)) cur[i * w + rng() % w] ^= 1 + rng() % 255;
  }
  return {snap, cur};
}

TEST(DeltaGpuTest, DeviceEncodingEqualsTheHostsAndApplies) {
  REFIT_SKIP_WITHOUT_GPU("delta_gpu_test");
  for (int w : {1, 2, 4}) {
    for (int64_t bytes : {int64_t{0}, int64_t{48}, int64_t{32768 * 3 + 4 * 37}, int64_t{1 << 22}}) {
      for (double f : {0.0, 0.003, 0.02, 0.2, 1.0}) {
        auto [snap, cur] = Versions(bytes, w, f, static_cast<uint32_t>(bytes + w));
        Dev dcur(bytes), dsnap(bytes), scratch(GpuDeltaScratchBytes(bytes));
        dcur.Put(cur);
        dsnap.Put(snap);
        auto c = GpuCountChanged(dcur.p, dsnap.p, bytes, w, scratch.p, nullptr);
        ASSERT_TRUE(c.ok()) << c.status();
        ASSERT_EQ(*c, CountChangedWords(cur, snap, w)) << "w=" << w << " bytes=" << bytes;
        for (DeltaEncoding e : {DeltaEncoding::kDense, DeltaEncoding::kIndices,
                                DeltaEncoding::kBitmask}) {
          const int64_t n = bytes / w;
          const int64_t cap = 32 + DeltaPayloadBytes(e, w, n, e == DeltaEncoding::kDense ? n : *c);
          Bytes host(cap);
          ASSERT_TRUE(EncodeDelta(cur, snap, w, e, *c, absl::MakeSpan(host)).ok());
          Dev out(cap);
          auto written = GpuEncodeDelta(dcur.p, bytes, w, e, *c, scratch.p, out.p, cap, nullptr);
          ASSERT_TRUE(written.ok()) << written.status();
          ASSERT_EQ(*written, cap);
          ASSERT_EQ(out.Get(cap), host) << DeltaEncodingName(e) << " w=" << w << " bytes=" << bytes
                                        << " f=" << f;
          Dev target(bytes);
          target.Put(snap);
          absl::Status s = GpuApplyDelta(out.p, cap, target.p, bytes, scratch.p, nullptr);
          ASSERT_TRUE(s.ok()) << s;
          ASSERT_EQ(target.Get(bytes), cur) << DeltaEncodingName(e);
        }
      }
    }
  }
}

TEST(DeltaGpuTest, MalformedMessagesLeaveTheTargetAlone) {
  REFIT_SKIP_WITHOUT_GPU("delta_gpu_test");
  const int64_t bytes = 65536 + 6;
  auto [snap, cur] = Versions(bytes, 2, 0.01, 9);
  for (DeltaEncoding e : {DeltaEncoding::kIndices, DeltaEncoding::kBitmask}) {
    const int64_t c = CountChangedWords(cur, snap, 2);
    Bytes msg(32 + DeltaPayloadBytes(e, 2, bytes / 2, c));
    ASSERT_TRUE(EncodeDelta(cur, snap, 2, e, c, absl::MakeSpan(msg)).ok());
    if (e == DeltaEncoding::kIndices) {
      uint32_t past = static_cast<uint32_t>(bytes / 2);
      std::memcpy(msg.data() + 32 + 4 * (c / 2), &past, 4);
    } else {
      msg[32 + 5] ^= 0x10;
    }
    Dev dmsg(msg.size()), target(bytes), scratch(GpuDeltaScratchBytes(bytes));
    dmsg.Put(msg);
    target.Put(snap);
    absl::Status s = GpuApplyDelta(dmsg.p, msg.size(), target.p, bytes, scratch.p, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << DeltaEncodingName(e) << ": " << s;
    EXPECT_EQ(target.Get(bytes), snap) << DeltaEncodingName(e);
  }
}

TEST(DeltaGpuTest, DeviceDigestEqualsTheHosts) {
  REFIT_SKIP_WITHOUT_GPU("delta_gpu_test");
  for (int w : {1, 2, 4, 8}) {
    const int64_t bytes = (1 << 20) + 8 * 13;
    auto [snap, cur] = Versions(bytes, w, 0.0, 11);
    Dev d(bytes), scratch(GpuDeltaScratchBytes(0));
    d.Put(snap);
    const uint64_t key = PositionKey(7, 4096);
    auto g = GpuDigest(d.p, bytes, w, key, scratch.p, nullptr);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(*g, DigestContiguous(snap.data(), bytes, w, key)) << "w=" << w;
  }
}

double Ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms;
}

// Figures: 1 GiB of BF16, 2% of words changed at random.
TEST(DeltaGpuTest, Throughput) {
  REFIT_SKIP_WITHOUT_GPU("delta_gpu_test");
  const int64_t bytes = int64_t{1} << 30;
  const int64_t n = bytes / 2;
  Bytes snap(bytes);
  std::mt19937_64 rng(5);
  for (int64_t i = 0; i < bytes; i += 8) {
    const uint64_t x = rng();
    std::memcpy(snap.data() + i, &x, 8);
  }
  Bytes cur = snap;
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  for (int64_t k = 0; k < n / 50; ++k) cur[pick(rng) * 2] ^= 0x5a;
  const int64_t changed = CountChangedWords(cur, snap, 2);
  Dev dcur(bytes), dsnap(bytes), copy(bytes), scratch(GpuDeltaScratchBytes(bytes));
  dcur.Put(cur);
  dsnap.Put(snap);
  const int64_t cap = 32 + DeltaPayloadBytes(DeltaEncoding::kBitmask, 2, n, changed);
  Dev out(cap);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto best = [&](auto&& f) {
    double b = 1e30;
    for (int it = 0; it < 6; ++it) {
      cudaEventRecord(e0);
      f();
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      if (it > 0) b = std::min(b, Ms(e0, e1));
    }
    return b;
  };
  const double copy_ms = best([&] { cudaMemcpyAsync(copy.p, dcur.p, bytes, cudaMemcpyDeviceToDevice); });
  int64_t c = 0;
  DeltaEncoding enc = DeltaEncoding::kDense;
  int64_t wire = 0;
  const double encode_ms = best([&] {
    c = *GpuCountChanged(dcur.p, dsnap.p, bytes, 2, scratch.p, nullptr);
    enc = ChooseEncoding(2, n, c);
    wire = *GpuEncodeDelta(dcur.p, bytes, 2, enc, c, scratch.p, out.p, cap, nullptr);
  });
  ASSERT_EQ(c, changed);
  const double apply_ms = best([&] {
    ASSERT_TRUE(GpuApplyDelta(out.p, wire, copy.p, bytes, scratch.p, nullptr).ok());
  });
  uint64_t digest = 0;
  const double digest_ms = best([&] { digest = *GpuDigest(dcur.p, bytes, 2, 0, scratch.p, nullptr); });
  EXPECT_EQ(copy.Get(bytes) == cur, true);
  EXPECT_EQ(digest, DigestContiguous(cur.data(), bytes, 2, 0));
  const double gb = bytes / 1e9;
  std::printf("delta_gpu_test figures, 1 GiB of BF16, %.2f%% of words changed (%s, %.1f%% of dense bytes):\n",
              100.0 * c / n, DeltaEncodingName(enc), 100.0 * wire / bytes);
  std::printf("  device copy of the bytes  %8.3f ms  %7.0f GB/s read\n", copy_ms, gb / copy_ms * 1e3);
  std::printf("  encode (count + gather)   %8.3f ms  %7.0f GB/s read of current + snapshot (%.2f of the copy's read rate)\n",
              encode_ms, 2 * gb / encode_ms * 1e3, (2 * gb / encode_ms) / (gb / copy_ms));
  std::printf("  apply                     %8.3f ms\n", apply_ms);
  std::printf("  digest                    %8.3f ms  %7.0f GB/s read\n", digest_ms, gb / digest_ms * 1e3);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace
}  // namespace refit
