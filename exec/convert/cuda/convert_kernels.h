// CUDA kernels of conversions (plan/conversion.h), computing exactly what
// the host loops of exec/convert/quantize.h compute. Plain C++ API, no CUDA or
// Abseil headers. Dense data is a row-major box [L, R, C] of a tensor:
// L = the product of the leading dims (tiles of 1 there), R and C the last
// two dims, whose first element sits at global row r0 and column c0; tiles
// are block_r x block_c on those two dims (128 x 128 FP8 blocks, 1 x 32
// MXFP8 blocks).
#ifndef REFIT_EXEC_CONVERT_CUDA_CONVERT_KERNELS_H_
#define REFIT_EXEC_CONVERT_CUDA_CONVERT_KERNELS_H_

#include <cstdint>

namespace refit {
namespace cuda {

// Element dtypes of the sources.
inline constexpr int kConvertBF16 = 0;
inline constexpr int kConvertF16 = 1;
inline constexpr int kConvertF32 = 2;

// Scale modes: exec/convert/quantize.h's ScaleMode values.
inline constexpr int kScaleFloat = 0;
inline constexpr int kScalePow2 = 1;
inline constexpr int kScaleRequant = 2;
inline constexpr int kScaleE8m0 = 3;  // scales are E8M0 bytes, not f32
// kScaleRequant's arithmetic, each scale written as its exponent byte (DeepGEMM
// on SM100's UE8M0 scales).
inline constexpr int kScaleRequantE8m0 = 4;

// The MXFP8 block the MX kernels are written for (one warp per block); the
// host dispatcher checks it against the format table's MXFP8 row
// (layout/quant_format.h).
inline constexpr int kMxfp8KernelBlock = 32;

struct DenseBox {
  const char* data;  // device
  int dtype;         // kConvert*
  int64_t L, R, C;   // extents
  int64_t r0, c0;    // global origin of the last two dims
  int64_t block_r, block_c;
};

// The number of tiles of `b` along rows / columns (intersecting ones).
int64_t TileRows(const DenseBox& b);
int64_t TileCols(const DenseBox& b);

// amax[(l * TileRows + i) * TileCols + j] = max |x| over the part of each
// tile inside the box (f32); *bad (initialized by the caller to INT64_MAX)
// becomes the smallest dense index of a non-finite element. Returns the
// launch's cudaError_t as an int.
int LaunchTileAmax(const DenseBox& b, float* amax, long long* bad, void* stream);

// out[k] = the codes of QuantizeHost (exec/convert/quantize.h) for every element
// (none when out is null),
// with the scales of BlockScale(amax[tile], mode) (mode: kScale*); scales
// of the tiles whose first element lies in the box go to `scales`
// (row-major over those, f32, or bytes for kScaleE8m0; may be null).
int LaunchQuantize(const DenseBox& b, const float* amax, int mode,
                   unsigned char* out, void* scales, void* stream);

// Both of the above in one pass, for a box none of whose tiles another rank
// holds part of (block_r * block_c <= 16384): *bad as in LaunchTileAmax.
// 1 x 32 tiles (MXFP8): BF16 rows of whole blocks take a vectorized
// kernel (four lanes per block, 16-byte loads), others one warp per block.
int LaunchQuantizeFused(const DenseBox& b, int mode, unsigned char* out,
                        void* scales, long long* bad, void* stream);

// out[i] = f32(x[i]) or -exp(f32(x[i])) (exp in double, rounded once).
int LaunchCastF32(const char* in, int dtype, int64_t n, bool neg_exp, float* out,
                  void* stream);

}  // namespace cuda
}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_CUDA_CONVERT_KERNELS_H_
