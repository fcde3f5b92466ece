// GPU staging's changed-sector apply (StagedBuffers::FindChanged and
// ApplyChanged over CudaStagingMemory): after the pause every live byte
// equals staging, whatever the changes (sparse words, dense ones, none, a
// partial tile and chunk at a buffer's end, a buffer not 16-byte aligned
// or of an odd size, one in pinned host memory); a round that aborted
// after the listing and before its apply leaves every live byte at the
// previous version; a dense apply (one launch for the device buffers)
// and a reset write every byte. Skips without a CUDA device.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "client/cuda_staging_memory.h"
#include "client/staged_buffers.h"
#include "gtest/gtest.h"
#include "testing/gpu_test.h"

namespace refit {
namespace {

// Buffers of an engine and the host's copy of what each should hold.
struct Engine {
  testing::DeviceCopies mem;
  std::vector<char*> live;
  std::vector<int64_t> bytes;
  std::vector<std::vector<uint8_t>> want;

  // A buffer of `bytes` random bytes, `skew` bytes past a 256-byte
  // boundary.
  void Add(int64_t bytes_, int skew, uint32_t seed) {
    std::vector<uint8_t> v(bytes_);
    std::mt19937 rng(seed);
    for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
    char* d = mem.Add(nullptr, bytes_ + skew) + skew;
    EXPECT_EQ(cudaMemcpy(d, v.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
    live.push_back(d);
    bytes.push_back(bytes_);
    want.push_back(std::move(v));
  }
};

// Changes `fraction` of the 2-byte words of `v` (the last odd byte too,
// with that chance).
void Change(std::vector<uint8_t>* v, double fraction, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  for (size_t i = 0; i < v->size(); i += 2) {
    if (u(rng) < fraction) (*v)[i] ^= static_cast<uint8_t>(1 + rng() % 255);
  }
}

// Writes each buffer's next version (its `fraction` of words changed)
// into staging, as a round arriving: want_next holds it.
std::vector<std::vector<uint8_t>> Arrive(const Engine& e, const StagedBuffers& s,
                                         const std::vector<double>& fraction, uint32_t seed) {
  std::vector<std::vector<uint8_t>> next = e.want;
  for (size_t b = 0; b < next.size(); ++b) {
    Change(&next[b], fraction[b], seed + static_cast<uint32_t>(b));
    EXPECT_EQ(cudaMemcpy(s.staging()[b], next[b].data(), next[b].size(), cudaMemcpyDefault),
              cudaSuccess);
  }
  return next;
}

// Whether every live byte equals `want` (naming the first buffer that
// differs).
std::string LiveDiffers(const Engine& e, const std::vector<std::vector<uint8_t>>& want) {
  for (size_t b = 0; b < want.size(); ++b) {
    std::vector<uint8_t> got(want[b].size());
    if (cudaMemcpy(got.data(), e.live[b], got.size(), cudaMemcpyDeviceToHost) != cudaSuccess) {
      return "cudaMemcpy";
    }
    if (got != want[b]) return "buffer " + std::to_string(b);
  }
  return "";
}

TEST(StagedScatterGpuTest, LiveEqualsStagingAfterTheApplyAndPreviousAfterAnAbort) {
  REFIT_SKIP_WITHOUT_GPU("StagedScatterGpuTest");
  Engine e;
  e.Add(24 << 20, 0, 1);       // 0: sparse changes (BF16 weights of a delta round)
  e.Add((3 << 20) + 6, 0, 2);  // 1: a partial tile and a partial chunk at the end
  e.Add(4 << 20, 0, 3);        // 2: 30% changed: nearly every sector
  e.Add(1 << 20, 0, 4);        // 3: unchanged
  e.Add((1 << 20) + 2, 2, 5);  // 4: 2 bytes past alignment: copied by cudaMemcpyAsync
  e.Add(4097, 0, 6);           // 5: an odd size
  e.Add(2 << 20, 0, 7);        // 6: in pinned host staging (past the budget)
  int64_t fast = 0;
  for (size_t b = 0; b + 1 < e.bytes.size(); ++b) fast += e.bytes[b];
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  auto s = StagedBuffers::Create(e.live, e.bytes, CudaStagingMemory(0), fast, deadline);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->overflow_bytes(), 2 << 20);
  const std::vector<double> sparse = {0.02, 0.02, 0.3, 0, 0.02, 0.02, 0.02};

  // Round 1 arrives and is applied by its changed words.
  std::vector<std::vector<uint8_t>> v1 = Arrive(e, **s, sparse, 100);
  absl::StatusOr<bool> listed = (*s)->FindChanged(deadline);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_TRUE(*listed);
  EXPECT_EQ(LiveDiffers(e, e.want), "") << "the listing wrote live bytes";
  absl::StatusOr<double> pause = (*s)->ApplyChanged(deadline);
  ASSERT_TRUE(pause.ok()) << pause.status();
  EXPECT_EQ(LiveDiffers(e, v1), "") << "live differs from staging after the apply";
  e.want = v1;

  // Round 2 arrives and is listed, then aborts: live stays at round 1, and
  // Reset brings staging back to it.
  (void)Arrive(e, **s, sparse, 200);
  listed = (*s)->FindChanged(deadline);
  ASSERT_TRUE(listed.ok() && *listed) << listed.status();
  ASSERT_TRUE((*s)->Reset(deadline).ok());
  EXPECT_EQ(LiveDiffers(e, v1), "") << "an abort before the apply changed live bytes";
  EXPECT_EQ((*s)->ApplyChanged(deadline).status().code(), absl::StatusCode::kFailedPrecondition)
      << "a reset round must not be applied";
  for (size_t b = 0; b < v1.size(); ++b) {
    std::vector<uint8_t> st(v1[b].size());
    ASSERT_EQ(cudaMemcpy(st.data(), (*s)->staging()[b], st.size(), cudaMemcpyDefault), cudaSuccess);
    EXPECT_EQ(st, v1[b]) << "staging of buffer " << b << " after the reset";
  }

  // Round 3: changes everywhere, every sector of buffer 2.
  std::vector<std::vector<uint8_t>> v3 = Arrive(e, **s, {0.1, 0.001, 1, 0.1, 0.1, 0.1, 0.1}, 300);
  listed = (*s)->FindChanged(deadline);
  ASSERT_TRUE(listed.ok() && *listed) << listed.status();
  ASSERT_TRUE((*s)->ApplyChanged(deadline).ok());
  EXPECT_EQ(LiveDiffers(e, v3), "") << "live differs from staging after the apply";
  e.want = v3;

  // Round 4, a dense one: Apply copies every byte.
  std::vector<std::vector<uint8_t>> v4 = Arrive(e, **s, {0.5, 0.5, 0.5, 0, 0.5, 0.5, 0.5}, 400);
  ASSERT_TRUE((*s)->Apply(deadline).ok());
  EXPECT_EQ(LiveDiffers(e, v4), "") << "live differs from staging after a dense apply";
}

}  // namespace
}  // namespace refit
