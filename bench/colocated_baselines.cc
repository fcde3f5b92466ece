// The floor, per-tensor and bucketed baselines (see colocated_baselines.h).
#include "bench/colocated_baselines.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "exec/program/copy_program.h"
#include "exec/cuda/pack_kernels.h"
#include "exec/pull/cuda/pull_kernels.h"
#include "testing/reference_copy.h"

namespace refit::bench {
namespace {

// Flips the first byte of rank 0's first record in `a`, expects Pattern to
// find exactly one wrong element, and restores the byte. INTERNAL when the
// check misses it.
absl::Status FlippedByteIsFound(const SideLayout& side, const Arena& a) {
  char* at = nullptr;
  PatternOptions po;
  po.rank = 0;
  ForEachPatternRow(side, po, [&](const Record&, int32_t b, const std::vector<int64_t>& inner,
                                  int64_t off, int64_t) {
    if (at == nullptr && !inner.empty()) at = a.base + a.offset[b] + off + inner[0];
  });
  if (at == nullptr) return absl::OkStatus();
  unsigned char v = 0;
  CK(cudaMemcpy(&v, at, 1, cudaMemcpyDeviceToHost));
  const unsigned char flipped = v ^ 0xFF;
  CK(cudaMemcpy(at, &flipped, 1, cudaMemcpyHostToDevice));
  absl::Status s = Pattern(side, 0, a, 1, true);
  CK(cudaMemcpy(at, &v, 1, cudaMemcpyHostToDevice));
  if (s.ok() || !absl::StartsWith(s.message(), "1 wrong elements")) {
    return absl::InternalError(absl::StrCat(
        "the GPU pattern check did not find exactly one flipped byte: ", s.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> Baselines(const Case& c, int iters) {
  CK(cudaSetDevice(0));
  std::map<std::string, std::string> r;
  REFIT_ASSIGN_OR_RETURN(Plan hf, CasePlan(c, /*hf_source=*/true));
  REFIT_ASSIGN_OR_RETURN(Arena src, Allocate(hf.src, 0, 0));
  REFIT_ASSIGN_OR_RETURN(Arena dst, Allocate(hf.dst, 0, 0xEE));
  REFIT_RETURN_IF_ERROR(Pattern(hf.src, 0, src, 1, false));
  // Tasks per HF tensor (source buffer), in buffer order.
  std::map<int32_t, std::vector<CopyTask>> by_src;
  for (const Message& m : hf.messages) {
    REFIT_ASSIGN_OR_RETURN(std::vector<CopyTask> t, DirectProgram(hf, m));
    for (const CopyTask& k : t) by_src[k.src_buffer].push_back(k);
  }
  const std::vector<char*> sp = src.Pointers(), dp = dst.Pointers();
  std::vector<ResolvedCopy> all;
  std::vector<std::pair<int64_t, int64_t>> group;  // (first, count) per tensor
  for (auto& [b, tasks] : by_src) {
    REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> rc, ResolveTasks(tasks, sp, dp, nullptr, nullptr));
    group.emplace_back(all.size(), rc.size());
    all.insert(all.end(), rc.begin(), rc.end());
  }
  ResolvedCopy* dev = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&dev), all.size() * sizeof(ResolvedCopy)));
  CK(cudaMemcpy(dev, all.data(), all.size() * sizeof(ResolvedCopy), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto per_tensor = [&]() -> absl::Status {
    for (const auto& [first, n] : group) {
      CK(static_cast<cudaError_t>(cuda::LaunchCopies(dev + first, static_cast<int>(n), s)));
    }
    CK(cudaStreamSynchronize(s));
    return absl::OkStatus();
  };
  REFIT_RETURN_IF_ERROR(per_tensor());
  // The engine's bytes checked on the GPU, the GPU's pattern against the
  // host's definition on the first records of both sides, and the GPU
  // check seen to fail on one flipped byte.
  absl::Status ok = Pattern(hf.dst, 0, dst, 1, true);
  if (ok.ok()) ok = PatternOnHost(hf.src, 0, src, 1, true, 64);
  if (ok.ok()) ok = PatternOnHost(hf.dst, 0, dst, 1, true, 64);
  if (ok.ok()) ok = FlippedByteIsFound(hf.dst, dst);
  r["per_tensor_check"] = ok.ok() ? "PASS" : absl::StrCat("FAIL: ", ok.message());
  // Every other row compares its engine bytes with these (checked above).
  REFIT_ASSIGN_OR_RETURN(const unsigned long long ref_sum, Checksum(hf.dst, 0, dst, 0));
  r["ref_sum"] = absl::StrCat(ref_sum);
  absl::Time t0 = absl::Now();
  for (int i = 0; i < iters; ++i) REFIT_RETURN_IF_ERROR(per_tensor());
  r["per_tensor_ms"] = absl::StrCat(absl::ToDoubleMilliseconds(absl::Now() - t0) / iters);

  // Bucketed: HF tensors packed into 1 GiB buckets, then copied out.
  int64_t kBucket = 1LL << 30;  // or the largest tensor, if larger
  for (const BufferSpec& b : hf.src.buffers) {
    kBucket = std::max(kBucket, (b.byte_size + 255) / 256 * 256);
  }
  char* bucket = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&bucket), kBucket));
  std::vector<std::vector<int32_t>> buckets(1);
  int64_t used = 0;
  for (auto& [b, tasks] : by_src) {
    const int64_t n = (hf.src.buffers[b].byte_size + 255) / 256 * 256;
    if (used > 0 && used + n > kBucket) {
      buckets.emplace_back();
      used = 0;
    }
    buckets.back().push_back(b);
    used += n;
  }
  // Copy-out tasks per bucket, resolved against the bucket (once).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> out_groups(buckets.size());
  std::vector<std::vector<std::pair<int32_t, int64_t>>> packs(buckets.size());
  std::vector<ResolvedCopy> out_all;
  for (size_t k = 0; k < buckets.size(); ++k) {
    int64_t off = 0;
    for (int32_t b : buckets[k]) {
      std::vector<char*> bp(sp.size(), nullptr);
      bp[b] = bucket + off;
      REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> rc,
                             ResolveTasks(by_src[b], bp, dp, nullptr, nullptr));
      out_groups[k].emplace_back(out_all.size(), rc.size());
      out_all.insert(out_all.end(), rc.begin(), rc.end());
      packs[k].emplace_back(b, off);
      off += (hf.src.buffers[b].byte_size + 255) / 256 * 256;
    }
  }
  ResolvedCopy* out_dev = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&out_dev), out_all.size() * sizeof(ResolvedCopy)));
  CK(cudaMemcpy(out_dev, out_all.data(), out_all.size() * sizeof(ResolvedCopy),
                cudaMemcpyHostToDevice));
  auto bucketed = [&]() -> absl::Status {
    for (size_t k = 0; k < buckets.size(); ++k) {
      for (const auto& [b, off] : packs[k]) {
        CK(cudaMemcpyAsync(bucket + off, sp[b], hf.src.buffers[b].byte_size,
                           cudaMemcpyDeviceToDevice, s));
      }
      CK(cudaStreamSynchronize(s));  // the trainer's bucket is ready
      for (const auto& [first, n] : out_groups[k]) {
        CK(static_cast<cudaError_t>(cuda::LaunchCopies(out_dev + first, static_cast<int>(n), s)));
      }
      CK(cudaStreamSynchronize(s));  // the engine is done with the bucket
    }
    return absl::OkStatus();
  };
  CK(cudaMemset(dst.base, 0xEE, dst.bytes));
  REFIT_RETURN_IF_ERROR(bucketed());
  REFIT_ASSIGN_OR_RETURN(const unsigned long long bsum, Checksum(hf.dst, 0, dst, 0));
  r["bucketed_check"] = bsum == ref_sum ? "PASS" : "FAIL: engine checksum";
  t0 = absl::Now();
  for (int i = 0; i < iters; ++i) REFIT_RETURN_IF_ERROR(bucketed());
  r["bucketed_ms"] = absl::StrCat(absl::ToDoubleMilliseconds(absl::Now() - t0) / iters);
  int64_t total = 0;
  for (const Message& m : hf.messages) total += m.bytes;
  CK(cudaFree(bucket));
  CK(cudaFree(out_dev));
  CK(cudaFree(dev));
  CK(cudaFree(src.base));
  CK(cudaFree(dst.base));

  // The floor: one cudaMemcpy of the same bytes.
  char *x = nullptr, *y = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&x), total));
  CK(cudaMalloc(reinterpret_cast<void**>(&y), total));
  CK(cudaMemset(x, 1, total));
  CK(cudaMemcpy(y, x, total, cudaMemcpyDeviceToDevice));
  CK(cudaDeviceSynchronize());
  t0 = absl::Now();
  for (int i = 0; i < iters; ++i) CK(cudaMemcpy(y, x, total, cudaMemcpyDeviceToDevice));
  CK(cudaDeviceSynchronize());
  r["floor_ms"] = absl::StrCat(absl::ToDoubleMilliseconds(absl::Now() - t0) / iters);
  r["bytes"] = absl::StrCat(total);
  CK(cudaFree(x));
  CK(cudaFree(y));
  CK(cudaStreamDestroy(s));
  return r;
}

}  // namespace refit::bench
