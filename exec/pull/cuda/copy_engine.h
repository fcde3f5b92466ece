// Strided byte copies on the GPU's copy engines (DMA) instead of its SMs:
// what the colocated data plane (pull_runner.h) uses for the copies it
// reads from another GPU of the host, alongside its kernel for the copies
// on its own GPU. One cudaMemcpyAsync per contiguous run, one
// cudaMemcpy2DAsync per strided copy, spread over several streams: copies
// queued on one stream run one after another, each paying the engine's
// start-up, while several streams keep several copies in flight.
#ifndef REFIT_EXEC_PULL_CUDA_COPY_ENGINE_H_
#define REFIT_EXEC_PULL_CUDA_COPY_ENGINE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "exec/program/resolved_copy.h"

namespace refit {

// `copies` with rows contiguous on both sides made one row, and neighbours
// that continue each other on both sides (one row each, equal
// `allocations[i]`: the same source and destination allocations; a copy
// must not span two) joined into one; copies of zero bytes dropped. Same
// bytes, same order otherwise. `allocations` is empty (one allocation on
// each side) or as long as `copies`.
std::vector<ResolvedCopy> JoinContiguous(absl::Span<const ResolvedCopy> copies,
                                         absl::Span<const int64_t> allocations = {});

// `copies` (after JoinContiguous, same `allocations` rule) with one-row
// copies of equal length whose sources and destinations lie at constant
// distances (d_src, d_dst >= the length) made one strided copy: a
// fused qkv's per-group q pieces become one copy engine operation instead
// of one per group. The copies come back reordered (every destination byte
// is written once, so order does not matter); same bytes.
std::vector<ResolvedCopy> JoinStrided(absl::Span<const ResolvedCopy> copies,
                                      absl::Span<const int64_t> allocations = {});

// JoinContiguous then JoinStrided within each allocation pair of
// `allocations` (as above): the fewest copy-engine operations for `copies`.
std::vector<ResolvedCopy> JoinForCopyEngine(absl::Span<const ResolvedCopy> copies,
                                            absl::Span<const int64_t> allocations = {});

// `copies` spread over `n` (>= 1) lists of about equal bytes (each copy to
// the list with the fewest bytes so far, in order).
std::vector<std::vector<ResolvedCopy>> SpreadCopies(absl::Span<const ResolvedCopy> copies,
                                                    int n);

// Enqueues list i of `lists` on `streams[i]` (cudaStream_t of the current
// device; lists.size() == streams.size()), the lists' copies interleaved so
// that every stream starts at once: cudaMemcpyAsync for one row,
// cudaMemcpy2DAsync for strided rows, with cudaMemcpyDefault (unified
// addresses, peer memory included). UNAVAILABLE with the CUDA error naming
// the copy.
absl::Status EnqueueCopyEngine(const std::vector<std::vector<ResolvedCopy>>& lists,
                               absl::Span<void* const> streams);

}  // namespace refit

#endif  // REFIT_EXEC_PULL_CUDA_COPY_ENGINE_H_
