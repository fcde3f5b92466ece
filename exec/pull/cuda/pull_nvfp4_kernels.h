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
// Receivers that compute the global amax themselves (engine_amax, see
// exec/pull/fused_pull.h's EngineAmaxConversions): global_amax points at
// the amax the item quantizes with (the previous round's), the kernel
// raises *seen (f32 bits) to the region's amax, and the redo pass runs the
// item again when *changed.
struct PullNvfp4Item {
  const char* src;
  unsigned char* dst;
  unsigned char* scales;
  const float* global_amax;
  const void* table;
  unsigned int* seen;   // null: the amax is the trainer's
  const int* changed;   // null: never redone
  int64_t src_pitch, dst_pitch, scale_pitch;
  int32_t rows, cols;
  int32_t w_r0, w_r1, w_c0, w_c1;
  int32_t s_r0, s_r1, s_c0, s_c1;
  int32_t vec;  // set by the caller: PullNvfp4VectorOk
};

// A global amax that the receiver computes (one per parameter and leading
// index): `amax` (its own memory) is what the items quantized with, `seen`
// this round's amax (f32 bits, raised by the items; 0 before them),
// `changed` whether the two differ.
struct PullNvfp4EngineAmax {
  float* amax;
  unsigned int* seen;
  int* changed;
};

// A threshold table (index `table`) built from a computed amax: rebuilt
// when *changed, which also writes the amax to out_amax and its global
// scale amax / 2688 to out_scale (may be null): the trainer's scratch that
// the copies read.
struct PullNvfp4EngineTable {
  const float* amax;
  const int* changed;
  float* out_amax;
  float* out_scale;
  int64_t table;
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

// For each of the n entries (device array): changed = seen != amax; amax
// takes seen; seen is reset to 0. *zero becomes the smallest index of an
// entry whose amax is 0 (every value zero: no global scale). Returns the
// launch's cudaError_t as an int.
int LaunchPullNvfp4EngineAmax(const PullNvfp4EngineAmax* entries, int64_t n, long long* zero,
                              void* stream);

// Rebuilds the n tables of `list` (device array) whose amax changed, and
// writes their outputs (PullNvfp4EngineTable).
int LaunchPullNvfp4Rebuild(const PullNvfp4EngineTable* list, int64_t n, void* tables,
                           void* stream);

// Runs again, on few thread blocks, the items whose *changed is set (after
// LaunchPullNvfp4EngineAmax and LaunchPullNvfp4Rebuild).
int LaunchPullNvfp4Redo(const PullNvfp4Item* items, int64_t n, long long* bad, void* stream);

// Runs the device array `items` (n < 2^31), a thread block each, on
// `stream`; *bad (the caller sets it to a large value) becomes the
// smallest index of an item whose region holds a NaN or infinity (its
// bytes are then unspecified). Returns the launch's cudaError_t as an int.
int LaunchPullNvfp4(const PullNvfp4Item* items, int64_t n, long long* bad, void* stream);

}  // namespace cuda
}  // namespace refit

#endif  // REFIT_EXEC_PULL_CUDA_PULL_NVFP4_KERNELS_H_
