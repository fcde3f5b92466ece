// CUDA pack/unpack kernels over 2-D copy tasks (plain C++ API, no Abseil).
// One launch runs every task of a round: 16-byte vector copies when a
// task's pointers, row bytes and strides are 16-byte aligned, bytes
// otherwise.
#ifndef REFIT_EXEC_CUDA_PACK_KERNELS_H_
#define REFIT_EXEC_CUDA_PACK_KERNELS_H_

#include <cstdint>

#include "exec/program/resolved_copy.h"

namespace refit {
namespace cuda {

// Launches the copies of the device array `tasks` (n entries) on `stream`
// (a cudaStream_t). Returns the cudaError_t of the launch as an int
// (0 = success).
int LaunchCopies(const ResolvedCopy* tasks, int n, void* stream);

}  // namespace cuda
}  // namespace refit

#endif  // REFIT_EXEC_CUDA_PACK_KERNELS_H_
