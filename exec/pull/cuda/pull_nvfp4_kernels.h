// The NVFP4 quantize-on-pull kernel (exec/pull/fused_pull.h, NVFP4 items
// resolved by pull_nvfp4_items.h): plain C++ API, no CUDA or Abseil
// headers.
#ifndef REFIT_EXEC_PULL_CUDA_PULL_NVFP4_KERNELS_H_
#define REFIT_EXEC_PULL_CUDA_PULL_NVFP4_KERNELS_H_

#include <cstdint>

namespace refit {
namespace cuda {

// One NVFP4 item: a region of `rows` x `cols` BF16 elements (cols a
// multiple of 16; row r at src + 2 * r * src_pitch bytes), quantized with
// the global scale global_amax[0] / 2688 (exec/convert/nvfp4.h). The packed codes
// of the region-relative rectangle [w_r0, w_r1) x [w_c0, w_c1) (even
// columns) go to dst: the byte of columns c, c + 1 of row r at
// dst + (r - w_r0) * dst_pitch + (c - w_c0) / 2; the e4m3 scale bytes of
// the 16-blocks [s_r0, s_r1) x [s_c0, s_c1) (row, block of the row) to
// scales + (i - s_r0) * scale_pitch + (j - s_c0). dst / scales may be null.
// With `table` set (kPullNvfp4TableBytes, filled by LaunchPullNvfp4Tables
// from the same global amax before the items run) the codes come from
// comparisons with its thresholds; without, from arithmetic per element.
// The same bytes either way.
struct PullNvfp4Item {
  const char* src;
  unsigned char* dst;
  unsigned char* scales;
  const float* global_amax;
  const void* table;
  int64_t src_pitch, dst_pitch, scale_pitch;
  int32_t rows, cols;
  int32_t w_r0, w_r1, w_c0, w_c1;
  int32_t s_r0, s_r1, s_c0, s_c1;
  int32_t vec;  // set by the caller: PullNvfp4VectorOk
};

// Whether an item may take 16-byte loads (src and its row pitch 16-byte
// aligned).
bool PullNvfp4VectorOk(const PullNvfp4Item& item);

// The bytes of one global amax's threshold table.
constexpr int64_t kPullNvfp4TableBytes = 2048;

// Fills tables + kPullNvfp4TableBytes * i from *global_amax[i] (device
// arrays, n < 2^31) on `stream`: one thread block a table, a few
// microseconds. Returns the launch's cudaError_t as an int.
int LaunchPullNvfp4Tables(const float* const* global_amax, int64_t n, void* tables,
                          void* stream);

// Runs the device array `items` (n < 2^31), a thread block each, on
// `stream`; *bad (the caller sets it to a large value) becomes the
// smallest index of an item whose region holds a NaN or infinity (its
// bytes are then unspecified). Returns the launch's cudaError_t as an int.
int LaunchPullNvfp4(const PullNvfp4Item* items, int64_t n, long long* bad, void* stream);

}  // namespace cuda
}  // namespace refit

#endif  // REFIT_EXEC_PULL_CUDA_PULL_NVFP4_KERNELS_H_
