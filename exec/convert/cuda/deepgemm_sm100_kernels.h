// DeepGEMM's SM100 packed UE8M0 weight scales on the GPU: the layout and
// arithmetic of exec/convert/deepgemm_sm100_scales.h (read from DeepGEMM's
// get_mn_major_tma_aligned_packed_ue8m0_tensor, csrc/jit_kernels/impls/
// smxx_layout.hpp at 0274ad7), bit-equal to the host path.
#ifndef REFIT_EXEC_CONVERT_CUDA_DEEPGEMM_SM100_KERNELS_H_
#define REFIT_EXEC_CONVERT_CUDA_DEEPGEMM_SM100_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace refit::cuda {

// Enqueues on `stream` the packing of `experts` weights' f32 tile scales
// ([experts, ceil(n/128), ceil(k/128)], device memory) into `out` (device,
// experts * 4 * ceil(k/512) * align(n, 4) bytes, padding zeroed): one
// thread per int32, each the exponent bytes (f32 bits >> 23) of four
// consecutive tile columns of its row's tile row. The scales are not
// checked here (the host path refuses non-powers of two). Returns the
// launch's error.
cudaError_t LaunchPackDeepgemmSm100Scales(const float* tile_scales, int64_t experts, int64_t n,
                                          int64_t k, uint8_t* out, cudaStream_t stream);

}  // namespace refit::cuda

#endif  // REFIT_EXEC_CONVERT_CUDA_DEEPGEMM_SM100_KERNELS_H_
