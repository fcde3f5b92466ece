// Delta and verified rounds on a GPU: the device versions of
// exec/delta/delta_codec.h and region_digest.h, producing the same bytes and
// sums (delta_gpu_test checks them against the host ones).
//
// An encoder reads the current and snapshot bytes once (a 16-byte compare
// per thread, the mask of changed words and a count per 32 KiB tile), scans
// the tile counts, and gathers the changed words (their indices too, for
// kIndices) from the mask: the second pass reads only the sectors that hold
// changes. Applying reads the message and writes only the changed words.
//
// All device pointers; `scratch` is device memory of GpuDeltaScratchBytes
// for the message's size, owned by the caller and used by one call at a
// time. Calls enqueue on `stream` and wait where they must read a count.
#ifndef REFIT_EXEC_DELTA_CUDA_GPU_DELTA_H_
#define REFIT_EXEC_DELTA_CUDA_GPU_DELTA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "exec/delta/delta_codec.h"

namespace refit {

// Device scratch bytes an encode, apply or digest of `bytes` bytes needs.
int64_t GpuDeltaScratchBytes(int64_t bytes);

// Compares `bytes` bytes of `cur` and `snap` in words of `word_bytes` and
// returns how many differ, leaving the mask and tile offsets in `scratch`
// for GpuEncodeDelta. Waits for the stream. INVALID_ARGUMENT for a word
// size other than 1, 2, 4, 8 or bytes not a whole number of words;
// INTERNAL/UNAVAILABLE for CUDA errors.
absl::StatusOr<int64_t> GpuCountChanged(const void* cur, const void* snap, int64_t bytes,
                                        int word_bytes, void* scratch, cudaStream_t stream);

// Writes the encoded message (header and payload, as EncodeDelta writes
// them) of `cur` in encoding `e` into `out` (`out_capacity` bytes), after
// GpuCountChanged on the same scratch returned `num_changed`. Returns the
// bytes written; enqueues only. INVALID_ARGUMENT when `e` cannot hold the
// message or `out` is too small.
absl::StatusOr<int64_t> GpuEncodeDelta(const void* cur, int64_t bytes, int word_bytes,
                                       DeltaEncoding e, int64_t num_changed, void* scratch,
                                       void* out, int64_t out_capacity, cudaStream_t stream);

// Applies the encoded message at `encoded` (device memory, `encoded_bytes`
// long) to `target` (`target_bytes`). Its header is read to the host, and
// indices or mask are checked on the device, before any byte of `target` is
// written: DATA_LOSS as ApplyDelta names it, `target` unchanged. Waits for
// the stream.
absl::Status GpuApplyDelta(const void* encoded, int64_t encoded_bytes, void* target,
                           int64_t target_bytes, void* scratch, cudaStream_t stream);

// Returns DigestRun's sum for device bytes; waits for the stream. The same
// argument checks as DigestRun.
absl::StatusOr<uint64_t> GpuDigest(const void* data, int64_t bytes, int element_bytes,
                                   uint64_t first_key, void* scratch, cudaStream_t stream);

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_CUDA_GPU_DELTA_H_
