// Copies on the copy engines (see copy_engine.h).
#include "exec/pull/cuda/copy_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>

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

std::vector<ResolvedCopy> JoinStrided(absl::Span<const ResolvedCopy> copies,
                                      absl::Span<const int64_t> allocations) {
  // The one-row copies by (allocations, length, source); the others as they are.
  struct One {
    int64_t alloc;
    ResolvedCopy c;
  };
  std::vector<One> ones;
  std::vector<ResolvedCopy> out;
  for (size_t i = 0; i < copies.size(); ++i) {
    const ResolvedCopy& c = copies[i];
    if (c.rows == 1) {
      ones.push_back({allocations.empty() ? 0 : allocations[i], c});
    } else if (c.rows > 1 && c.row_bytes > 0) {
      out.push_back(c);
    }
  }
  std::stable_sort(ones.begin(), ones.end(), [](const One& a, const One& b) {
    if (a.alloc != b.alloc) return a.alloc < b.alloc;
    if (a.c.row_bytes != b.c.row_bytes) return a.c.row_bytes < b.c.row_bytes;
    return a.c.src < b.c.src;
  });
  constexpr int64_t kMaxPitch = (int64_t{1} << 31) - 1;  // cudaMemcpy2D's pitch limit
  for (size_t i = 0; i < ones.size();) {
    ResolvedCopy c = ones[i].c;
    size_t j = i + 1;
    if (j < ones.size() && ones[j].alloc == ones[i].alloc &&
        ones[j].c.row_bytes == c.row_bytes) {
      const int64_t ds = ones[j].c.src - c.src, dd = ones[j].c.dst - c.dst;
      if (ds >= c.row_bytes && dd >= c.row_bytes && ds <= kMaxPitch && dd <= kMaxPitch) {
        while (j < ones.size() && ones[j].alloc == ones[i].alloc &&
               ones[j].c.row_bytes == c.row_bytes &&
               ones[j].c.src - ones[j - 1].c.src == ds &&
               ones[j].c.dst - ones[j - 1].c.dst == dd) {
          ++j;
        }
        c.rows = static_cast<int64_t>(j - i);
        c.src_row_stride = ds;
        c.dst_row_stride = dd;
      } else {
        j = i + 1;
      }
    }
    out.push_back(c);
    i = j;
  }
  return out;
}

std::vector<ResolvedCopy> JoinForCopyEngine(absl::Span<const ResolvedCopy> copies,
                                            absl::Span<const int64_t> allocations) {
  std::map<int64_t, std::vector<ResolvedCopy>> by_allocation;
  for (size_t i = 0; i < copies.size(); ++i) {
    by_allocation[allocations.empty() ? 0 : allocations[i]].push_back(copies[i]);
  }
  std::vector<ResolvedCopy> out;
  for (const auto& [alloc, group] : by_allocation) {
    const std::vector<ResolvedCopy> joined = JoinStrided(JoinContiguous(group));
    out.insert(out.end(), joined.begin(), joined.end());
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
