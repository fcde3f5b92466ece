// The quantize-on-pull kernel (exec/pull/fused_pull.h, exec/pull/cuda/pull_runner.h):
// plain C++ API, no CUDA or Abseil headers.
#ifndef REFIT_EXEC_CONVERT_CUDA_PULL_QUANTIZE_KERNELS_H_
#define REFIT_EXEC_CONVERT_CUDA_PULL_QUANTIZE_KERNELS_H_

#include <cstdint>

namespace refit {
namespace cuda {

// Quantize-on-pull (exec/pull/fused_pull.h's FusedItem, resolved to device
// addresses): one thread block reads a region of `rows` x `cols` BF16
// elements (<= 128 each; row r at src + 2 * r * src_pitch bytes) made of
// whole tile_r x tile_c tiles (128 x 128, or 1 x 32 blocks), computes each
// tile's scale (mode: kScaleFloat, kScalePow2, kScaleRequant or
// kScaleE8m0; kScaleRequant writes the requantized codes), writes the
// codes of the region-relative rectangle [w_r0, w_r1) x [w_c0, w_c1) to
// dst (its first element; rows dst_pitch bytes apart) and the scales of
// tiles [s_r0, s_r1) x [s_c0, s_c1) to scales (f32, or E8M0 bytes; rows
// scale_pitch elements apart). dst / scales may be null. With scale_src
// set (a record cutting tiles, exec/pull/fused_pull.h), tile (i, j) of the
// region is quantized with the scale at scale_src + (i * scale_src_pitch +
// j) * element bytes (f32, or an E8M0 byte), not its own amax's.
struct PullQuantItem {
  const char* src;
  unsigned char* dst;
  unsigned char* scales;
  const unsigned char* scale_src;
  int64_t src_pitch, dst_pitch, scale_pitch, scale_src_pitch;
  int32_t rows, cols;
  int32_t w_r0, w_r1, w_c0, w_c1;
  int32_t s_r0, s_r1, s_c0, s_c1;
  int32_t mode, tile_r, tile_c;
  int32_t vec;  // set by LaunchPullQuantize's caller: see PullQuantVectorOk
};

// Whether an item may take 16-byte loads (src and src_pitch 16-byte
// aligned, cols a multiple of 8).
bool PullQuantVectorOk(const PullQuantItem& item);

// Runs the device array `items` (n < 2^31) on `stream`; *bad (the caller
// initializes it to a large value) becomes the smallest index of an item
// whose region holds a NaN or infinity (its codes are then unspecified).
// Returns the launch's cudaError_t as an int.
int LaunchPullQuantize(const PullQuantItem* items, int64_t n, long long* bad, void* stream);

// The same in a given launch shape (the benchmark's comparison): `threads`
// (128 or 256) per block; a block per item, or a persistent grid of as
// many blocks as fit on the device, each walking items; `compact` (256
// threads only): registers capped for five blocks per SM. LaunchPullQuantize
// is 256 threads, a block per item, not compact. INVALID_VALUE otherwise.
int LaunchPullQuantizeShape(const PullQuantItem* items, int64_t n, long long* bad, void* stream,
                            int threads, bool persistent, bool compact);

}  // namespace cuda
}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_CUDA_PULL_QUANTIZE_KERNELS_H_
