// CUDA kernels of NVFP4 quantization (QuantFormat::kNvfp4), computing the
// bytes exec/convert/nvfp4.h computes on the host. Plain C++ API, no CUDA or Abseil
// headers. Dense data is convert_kernels.h's DenseBox with 1 x 16 tiles
// (block_r 1, block_c 16; c0 and C even); L indexes the leading dims
// (experts), one global scale each.
#ifndef REFIT_EXEC_CONVERT_CUDA_NVFP4_KERNELS_H_
#define REFIT_EXEC_CONVERT_CUDA_NVFP4_KERNELS_H_

#include "exec/convert/cuda/convert_kernels.h"

namespace refit {
namespace cuda {

// The NVFP4 block these kernels are written for (two 16-byte BF16 loads a
// block); the host dispatcher checks it against the format table's NVFP4
// row (layout/quant_format.h).
inline constexpr int kNvfp4KernelBlock = 16;

// Pass 1: per leading index l, global_amax[l] = max(global_amax[l], max |x|
// over the box's slice l) (the caller zeroes it first); with block_amax
// set, the amax of the part of every 1 x 16 tile inside the box, row-major
// over the intersecting tiles [L * R, TileCols]. *bad (INT64_MAX from the
// caller) becomes the smallest dense index of a non-finite element. Returns
// the launch's cudaError_t as an int.
int LaunchNvfp4Amax(const DenseBox& b, float* block_amax, float* global_amax,
                    long long* bad, void* stream);

// Pass 2: the packed E2M1 codes of every element into out (row-major, C / 2
// bytes a row) and the e4m3 scale bytes of the tiles whose first element
// lies in the box into scales (row-major over those; may be null), with
// global scale global_amax[l] / 2688 and the block amaxes block_amax
// (layout of pass 1), or, when block_amax is null, each tile's amax from
// the box itself (every tile whole in the box).
int LaunchNvfp4Quantize(const DenseBox& b, const float* block_amax,
                        const float* global_amax, unsigned char* out,
                        unsigned char* scales, void* stream);

// How the quantize pass codes a BF16 box of whole 16-aligned tiles: a box
// of at least kNvfp4TableMinBlocks 16-blocks by comparisons with a table of
// thresholds per global scale built in each thread block
// (exec/convert/nvfp4_thresholds.h), 4 16-blocks a thread in flight; a
// smaller one by arithmetic per element (nvfp4_block.cuh's
// RefitNvfp4Codes), as a table costs a few microseconds. Both write the
// same bytes; other boxes take the general kernel.
constexpr long long kNvfp4TableMinBlocks = 1 << 14;

}  // namespace cuda
}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_CUDA_NVFP4_KERNELS_H_
