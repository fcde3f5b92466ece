// Copies on the copy engines (see copy_engine.h).
#include "exec/cuda/copy_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "exec/cuda/cuda_status.h"

namespace refit {

std::vector<ResolvedCopy> JoinContiguous(absl::Span<const ResolvedCopy> copies,
                                         absl::Span<const int64_t> allocations) {
  std::vector<ResolvedCopy> out;
  out.reserve(copies.size());
  int64_t last = 0;  // allocations of out.back()
  for (size_t i = 0; i < copies.size(); ++i) {
    ResolvedCopy c = copies[i];
    const int64_t alloc = allocations.empty() ? 0 : allocations[i];
    if (c.rows <= 0 || c.row_bytes <= 0) continue;
    if (c.rows > 1 && c.src_row_stride == c.row_bytes && c.dst_row_stride == c.row_bytes) {
      c.row_bytes *= c.rows;
      c.rows = 1;
    }
    if (c.rows == 1) {
      c.src_row_stride = c.dst_row_stride = c.row_bytes;
      if (!out.empty() && last == alloc) {
        ResolvedCopy& b = out.back();
        if (b.rows == 1 && b.src + b.row_bytes == c.src && b.dst + b.row_bytes == c.dst) {
          b.row_bytes += c.row_bytes;
          b.src_row_stride = b.dst_row_stride = b.row_bytes;
          continue;
        }
      }
    }
    out.push_back(c);
    last = alloc;
  }
  return out;
}

std::vector<std::vector<ResolvedCopy>> SpreadCopies(absl::Span<const ResolvedCopy> copies,
                                                    int n) {
  n = std::max(1, n);
  std::vector<std::vector<ResolvedCopy>> lists(n);
  std::vector<int64_t> bytes(n, 0);
  for (const ResolvedCopy& c : copies) {
    const int i = static_cast<int>(std::min_element(bytes.begin(), bytes.end()) - bytes.begin());
    lists[i].push_back(c);
    bytes[i] += c.rows * c.row_bytes;
  }
  return lists;
}

absl::Status EnqueueCopyEngine(const std::vector<std::vector<ResolvedCopy>>& lists,
                               absl::Span<void* const> streams) {
  if (lists.size() != streams.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EnqueueCopyEngine: ", lists.size(), " lists for ", streams.size(), " streams"));
  }
  size_t longest = 0;
  for (const auto& l : lists) longest = std::max(longest, l.size());
  for (size_t k = 0; k < longest; ++k) {
    for (size_t i = 0; i < lists.size(); ++i) {
      if (k >= lists[i].size()) continue;
      const ResolvedCopy& c = lists[i][k];
      if (c.rows <= 0 || c.row_bytes <= 0) continue;
      cudaStream_t s = static_cast<cudaStream_t>(streams[i]);
      const cudaError_t e =
          c.rows == 1
              ? cudaMemcpyAsync(c.dst, c.src, c.row_bytes, cudaMemcpyDefault, s)
              : cudaMemcpy2DAsync(c.dst, c.dst_row_stride, c.src, c.src_row_stride,
                                  c.row_bytes, c.rows, cudaMemcpyDefault, s);
      if (e != cudaSuccess) {
        return CudaStatus(e,
                          absl::StrCat("copy-engine copy ", k, " of stream ", i, " (", c.rows,
                                       " x ", c.row_bytes, " bytes)"),
                          absl::StatusCode::kUnavailable);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace refit
