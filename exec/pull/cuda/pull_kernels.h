// The colocated data plane's gather-scatter kernel (plain C++ API, no CUDA
// or Abseil headers): one launch runs every copy of a round, each copy a
// strided 2-D byte copy from a sender's buffer (mapped into this process)
// into one of the receiver's buffers.
//
// Copies are cut at prepare (SplitPullItems) into items of at most
// `max_item_bytes`, one thread block each, so that a few huge tensors and
// thousands of small strided pieces alike spread over every SM. An item
// moves words of the widest size (16, 8, 4, 2 or 1 bytes) that divides its
// addresses, row bytes and strides; 16-byte loads and stores are the rule
// for bf16/fp32 weights.
#ifndef REFIT_EXEC_PULL_CUDA_PULL_KERNELS_H_
#define REFIT_EXEC_PULL_CUDA_PULL_KERNELS_H_

#include <cstdint>
#include <vector>

#include "exec/program/resolved_copy.h"

namespace refit {
namespace cuda {

// One thread block's work: `rows` rows of `row_words` words of
// (1 << word_shift) bytes.
struct PullItem {
  const char* src;
  char* dst;
  int64_t src_row_stride;  // bytes
  int64_t dst_row_stride;
  uint32_t rows;
  uint32_t row_words;
  uint32_t word_shift;  // 0..4
  uint32_t reserved;
};

// Items covering `copies` (device addresses), each at most max_item_bytes
// (a multiple of 16, >= 16) bytes. Copies of zero bytes give no item.
std::vector<PullItem> SplitPullItems(const std::vector<ResolvedCopy>& copies,
                                     int64_t max_item_bytes);

// Launches the items of the device array `items` (n entries, n < 2^31) on
// `stream` (a cudaStream_t): a thread block an item, or with max_blocks > 0
// at most max_blocks thread blocks, each running every max_blocks-th item
// (the SMs the copy does not occupy stay free for other kernels). Returns
// the launch's cudaError_t as an int (0 = success).
int LaunchPull(const PullItem* items, int64_t n, void* stream, int32_t max_blocks = 0);

// Benchmark and check helpers (device memory, `stream`): XORs every byte
// of [p, p + bytes) with `key` (p 16-byte aligned); adds to *sum (device)
// a position-dependent 64-bit checksum of the bytes p[i] ^ key, so that
// memory XORed with k and checked with key k sums as the original checked
// with key 0. Return the launch's error.
int LaunchXorBytes(char* p, int64_t bytes, uint8_t key, void* stream);
int LaunchChecksum(const char* p, int64_t bytes, uint8_t key,
                   unsigned long long* sum, void* stream);

}  // namespace cuda
}  // namespace refit

#endif  // REFIT_EXEC_PULL_CUDA_PULL_KERNELS_H_
