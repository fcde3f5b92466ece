// Test helpers for mapping/: small dense byte arrays with explicit slicing
// and concatenation, a checkpoint filled with distinct values, and an
// element-wise copier that moves bytes between two SideLayouts record by
// record (the tests' own oracle; it uses nothing of the planner).
#ifndef REFIT_MAPPING_TESTING_ARRAYS_H_
#define REFIT_MAPPING_TESTING_ARRAYS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "layout/layout.h"

namespace refit {
namespace testing_mapping {

// A dense row-major array of `shape`, `esize` bytes per element.
struct Arr {
  std::vector<int64_t> shape;
  DType dtype = DType::kBF16;
  std::vector<uint8_t> bytes;
  int64_t esize() const { return DTypeSize(dtype); }
};

Arr Zeros(std::vector<int64_t> shape, DType dtype);
// Elements [begin, begin + size) of dim `dim`.
Arr Slice(const Arr& a, int dim, int64_t begin, int64_t size);
// Concatenation along `dim` (all other dims equal).
Arr Cat(int dim, const std::vector<Arr>& parts);
// A new leading dim.
Arr Stack(const std::vector<Arr>& parts);
// Index i of dim 0, with dim 0 dropped.
Arr Member(const Arr& a, int64_t i);
// `rows` zero rows appended to dim 0.
Arr PadRows(const Arr& a, int64_t rows);

// A full tensor per name, with distinct pseudo-random bytes (seeded).
using Ckpt = std::map<std::string, Arr>;
Ckpt FillCheckpoint(const std::vector<TensorSpec>& tensors, uint64_t seed);

// Each rank's buffers by name.
using Bufs = std::map<std::string, Arr>;

// For every record of `side`, the bytes it addresses in `mem` (one byte
// vector per side.buffers entry) equal the checkpoint's elements of its box.
// Returns the first mismatch, naming tensor, rank and buffer.
absl::Status CheckRecords(const SideLayout& side,
                          const std::vector<std::vector<uint8_t>>& mem,
                          const Ckpt& ckpt);

// Fills every dst record element by element from a src record (of the
// tensor of the same name) that contains it. FAILED_PRECONDITION naming the
// element when no src record holds it.
absl::Status CopyElementwise(const SideLayout& src,
                             const std::vector<std::vector<uint8_t>>& src_mem,
                             const SideLayout& dst,
                             std::vector<std::vector<uint8_t>>* dst_mem);

}  // namespace testing_mapping
}  // namespace refit

#endif  // REFIT_MAPPING_TESTING_ARRAYS_H_
