// Copies on the copy engines (see copy_engine.h).
#include "exec/cuda/copy_engine.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "exec/cuda/cuda_status.h"

namespace refit {

std::vector<ResolvedCopy> JoinContiguous(absl::Span<const ResolvedCopy> copies) {
  std::vector<ResolvedCopy> out;
  out.reserve(copies.size());
  for (ResolvedCopy c : copies) {
    if (c.rows <= 0 || c.row_bytes <= 0) continue;
    if (c.rows > 1 && c.src_row_stride == c.row_bytes && c.dst_row_stride == c.row_bytes) {
      c.row_bytes *= c.rows;
      c.rows = 1;
    }
    if (c.rows == 1) {
      c.src_row_stride = c.dst_row_stride = c.row_bytes;
      if (!out.empty()) {
        ResolvedCopy& b = out.back();
        if (b.rows == 1 && b.src + b.row_bytes == c.src && b.dst + b.row_bytes == c.dst) {
          b.row_bytes += c.row_bytes;
          b.src_row_stride = b.dst_row_stride = b.row_bytes;
          continue;
        }
      }
    }
    out.push_back(c);
  }
  return out;
}

void SplitForCopyEngine(absl::Span<const ResolvedCopy> copies, int64_t min_row_bytes,
                        std::vector<ResolvedCopy>* engine, std::vector<ResolvedCopy>* kernel) {
  for (const ResolvedCopy& c : JoinContiguous(copies)) {
    (c.rows == 1 || c.row_bytes >= min_row_bytes ? engine : kernel)->push_back(c);
  }
}

absl::Status EnqueueCopyEngine(absl::Span<const ResolvedCopy> copies, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  for (size_t i = 0; i < copies.size(); ++i) {
    const ResolvedCopy& c = copies[i];
    if (c.rows <= 0 || c.row_bytes <= 0) continue;
    const cudaError_t e =
        c.rows == 1
            ? cudaMemcpyAsync(c.dst, c.src, c.row_bytes, cudaMemcpyDefault, s)
            : cudaMemcpy2DAsync(c.dst, c.dst_row_stride, c.src, c.src_row_stride, c.row_bytes,
                                c.rows, cudaMemcpyDefault, s);
    if (e != cudaSuccess) {
      return CudaStatus(e,
                        absl::StrCat("copy-engine copy ", i, " of ", copies.size(), " (",
                                     c.rows, " x ", c.row_bytes, " bytes)"),
                        absl::StatusCode::kUnavailable);
    }
  }
  return absl::OkStatus();
}

}  // namespace refit
