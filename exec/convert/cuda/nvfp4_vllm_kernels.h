// vLLM's online NVFP4 recipe on the device (exec/convert/nvfp4_vllm.h, formulas in
// exec/convert/nvfp4_vllm_math.h): BF16 16-blocks into e4m3 block scales and packed
// E2M1 codes as FlashInfer's cvt_warp_fp16_to_fp4 makes them, with the
// same rcp.approx.ftz.f32.
#ifndef REFIT_EXEC_CONVERT_CUDA_NVFP4_VLLM_KERNELS_H_
#define REFIT_EXEC_CONVERT_CUDA_NVFP4_VLLM_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "exec/convert/cuda/convert_kernels.h"

namespace refit::cuda {

// Quantizes `blocks` contiguous 16-blocks of BF16 bits at `in` with global
// scale g (Nvfp4VllmGlobalScale of the expert's amax): codes (8 bytes a
// block, even element low) and scales (one e4m3 byte a block), as
// QuantizeNvfp4VllmHost computes them given the device's reciprocals.
// Returns the launch's error.
cudaError_t LaunchNvfp4VllmQuantize(const uint16_t* in, int64_t blocks, float g, uint8_t* codes,
                                    uint8_t* scales, cudaStream_t stream);

// QuantizeNvfp4VllmBoxHost on the device: the dense box `b` (block_c 16,
// block_r 1; BF16, F16 or F32 elements; C and c0 even) into packed codes
// `out` (row-major over the box, C / 2 bytes a row) and the e4m3 bytes of
// its owned 16-blocks into `scales` (may be null), with SFScale
// sf_scale[l] (device memory) per leading index; block_amax (device, row-
// major over the intersecting tiles; null: each block's own max) gives the
// amax of the tiles the box cuts. Returns the launch's error.
cudaError_t LaunchNvfp4VllmQuantizeBox(const DenseBox& b, const float* block_amax,
                                       const float* sf_scale, uint8_t* out, uint8_t* scales,
                                       cudaStream_t stream);

// out[i] = rcp.approx.ftz.f32(in[i]) for i < n: the device's reciprocal,
// for tests that feed it to the host path. Returns the launch's error.
cudaError_t LaunchRcpApprox(const float* in, float* out, int64_t n, cudaStream_t stream);

}  // namespace refit::cuda

#endif  // REFIT_EXEC_CONVERT_CUDA_NVFP4_VLLM_KERNELS_H_
