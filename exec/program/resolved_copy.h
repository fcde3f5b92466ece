// ResolvedCopy: one strided 2-D byte copy between addresses (host or
// device): `rows` rows of `row_bytes` bytes, row i from
// src + i * src_row_stride to dst + i * dst_row_stride. The one declaration
// of it: the copy programs resolve to it (copy_program.h), the host loops,
// the CUDA pack kernels (cuda/pack_kernels.h) and the pull kernel
// (cuda/pull_kernels.h) take it. Plain C++ (no Abseil), so .cu files
// include it too.
#ifndef REFIT_EXEC_PROGRAM_RESOLVED_COPY_H_
#define REFIT_EXEC_PROGRAM_RESOLVED_COPY_H_

#include <cstdint>

namespace refit {

struct ResolvedCopy {
  const char* src = nullptr;
  char* dst = nullptr;
  int64_t rows = 0;
  int64_t row_bytes = 0;
  int64_t src_row_stride = 0;
  int64_t dst_row_stride = 0;
};

}  // namespace refit

#endif  // REFIT_EXEC_PROGRAM_RESOLVED_COPY_H_
