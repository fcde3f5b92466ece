// Strided byte copies on the GPU's copy engines (DMA) instead of its SMs:
// what the colocated data plane (pull_runner.h) uses for the copies it
// reads from another GPU of the host, where one cudaMemcpyAsync per
// contiguous run (cudaMemcpy2DAsync per strided copy) moves bytes over
// NVLink faster than a kernel's loads, and leaves every SM to the copies
// on the receiver's own GPU.
#ifndef REFIT_EXEC_CUDA_COPY_ENGINE_H_
#define REFIT_EXEC_CUDA_COPY_ENGINE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "exec/resolved_copy.h"

namespace refit {

// `copies` with rows contiguous on both sides made one row, and neighbours
// that continue each other on both sides (one row each) joined into one
// copy; copies of zero bytes dropped. Same bytes, same order otherwise.
std::vector<ResolvedCopy> JoinContiguous(absl::Span<const ResolvedCopy> copies);

// Splits `copies` (after JoinContiguous) into those for the copy engines
// (contiguous, or rows of at least `min_row_bytes`) and the rest (for a
// kernel: a DMA per short row is slower than SM loads).
void SplitForCopyEngine(absl::Span<const ResolvedCopy> copies, int64_t min_row_bytes,
                        std::vector<ResolvedCopy>* engine, std::vector<ResolvedCopy>* kernel);

// Enqueues every copy on `stream` (a cudaStream_t of the current device):
// cudaMemcpyAsync for one row, cudaMemcpy2DAsync for strided rows, both
// with cudaMemcpyDefault (unified addresses, peer memory included).
// UNAVAILABLE with the CUDA error naming the copy.
absl::Status EnqueueCopyEngine(absl::Span<const ResolvedCopy> copies, void* stream);

}  // namespace refit

#endif  // REFIT_EXEC_CUDA_COPY_ENGINE_H_
