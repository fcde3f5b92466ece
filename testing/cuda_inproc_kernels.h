// The device step of the in-process device transport
// (cuda_inproc_transport.h): a gate that holds a stream until host-mapped
// flags are set. Plain C++ API (no CUDA headers).
#ifndef REFIT_TESTING_CUDA_INPROC_KERNELS_H_
#define REFIT_TESTING_CUDA_INPROC_KERNELS_H_

#include <cstdint>

namespace refit {
namespace testing {

// Enqueues on `stream` one thread that returns once every one of the `n`
// flags (host-mapped memory, device address) is non-zero; n == 0 enqueues
// nothing. Returns the launch's cudaError_t as an int.
int LaunchWaitFlags(const int32_t* flags, int32_t n, void* stream);

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_CUDA_INPROC_KERNELS_H_
