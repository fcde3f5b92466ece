// CUDA pack/unpack kernels over 2-D copy tasks (plain C++ API, no Abseil).
// One launch runs every task of a round: 16-byte vector copies when a
// task's pointers, row bytes and strides are 16-byte aligned, bytes
// otherwise.
#ifndef REFIT_EXEC_CUDA_PACK_KERNELS_H_
#define REFIT_EXEC_CUDA_PACK_KERNELS_H_

#include <cstdint>

namespace refit {
namespace cuda {

// Same layout as refit::ResolvedCopy (copy_program.h).
struct DeviceCopy {
  const char* src;
  char* dst;
  int64_t rows;
  int64_t row_bytes;
  int64_t src_row_stride;
  int64_t dst_row_stride;
};

// Launches the copies of the device array `tasks` (n entries) on `stream`
// (a cudaStream_t). Returns the cudaError_t of the launch as an int
// (0 = success).
int LaunchCopies(const DeviceCopy* tasks, int n, void* stream);

}  // namespace cuda
}  // namespace refit

#endif  // REFIT_EXEC_CUDA_PACK_KERNELS_H_
