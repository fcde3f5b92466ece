// Layout: where the parts of logical tensors live in one side's buffers.
//
// A Record says: "on rank r, logical box B of tensor T lives in buffer X,
// the element at B's origin at byte offset o, and the element at
// B.origin + i lives at o + elem_size * sum_d map_d(i_d)". Each dim d maps
// through a DimMap: the index i_d in [0, B.shape(d)) is written in mixed
// radix over the DimMap's splits (outer to inner, product of sizes ==
// B.shape(d)), and each digit is multiplied by its split's stride (in
// elements). A plain row-major dim is one split {extent, stride}; an
// interleaving (Megatron's QKV grouped per query group, gate/up interleaved
// in chunks) is a dim split into (blocks x block size), each with its own
// stride — one record, however many chunks.
//
// Indexed buffers: Megatron's TEGroupedMLP keeps one parameter per local
// expert. One record covers them all when their layouts agree: with
// buffer_step > 0 the elements of box-relative dim-0 index i live in buffer
// `buffer + i * buffer_step` (all on the record's rank), offsets computed
// as above in each (dim 0 then usually has stride 0). The planner then
// works per rank, not per expert.
//
// Fusion is a destination sub-region: vLLM's qkv_proj holds q, k and v as
// three records in one buffer at different byte offsets. Replication is
// several records (on different ranks) covering the same box.
//
// A SideLayout is all of one side's (trainer's or engine's) tensors,
// buffers and records. Ranks are side-local: 0..world_size-1.
#ifndef REFIT_LAYOUT_LAYOUT_H_
#define REFIT_LAYOUT_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "layout/box.h"
#include "layout/tensor_spec.h"

namespace refit {

struct DimSplit {
  int64_t size = 1;    // number of index values of this digit (>= 1)
  int64_t stride = 0;  // element stride of this digit (>= 0)
  friend bool operator==(const DimSplit& a, const DimSplit& b) {
    return a.size == b.size && a.stride == b.stride;
  }
};

struct DimMap {
  // Outer to inner; may be empty if the extent is 0.
  absl::InlinedVector<DimSplit, 2> splits;
  friend bool operator==(const DimMap& a, const DimMap& b) {
    return a.splits == b.splits;
  }
};

struct ByteRange {
  int64_t begin = 0;
  int64_t size = 0;
  int64_t end() const { return begin + size; }
  friend bool operator==(const ByteRange& a, const ByteRange& b) {
    return a.begin == b.begin && a.size == b.size;
  }
  friend bool operator<(const ByteRange& a, const ByteRange& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.size < b.size;
  }
};

struct BufferSpec {
  int32_t rank = 0;
  std::string name;        // unique per rank, e.g. "model.layers.0.self_attn.qkv_proj.weight"
  int64_t byte_size = 0;
  // Byte ranges that no record fills on purpose (e.g. vocabulary padding
  // rows). Any other byte that no record claims is reported as unsourced.
  std::vector<ByteRange> padding;
  // Allocated by refit itself, not registered by the member: the converted
  // values a sender computes before its rounds (plan/conversion.h).
  bool scratch = false;
};

struct Record {
  int32_t tensor = 0;  // index into SideLayout::tensors
  int32_t rank = 0;
  int32_t buffer = 0;  // index into SideLayout::buffers; same rank
  Box box;             // logical region held (box.rank() == tensor rank)
  int64_t byte_offset = 0;   // of the element at box.origin
  absl::InlinedVector<DimMap, 3> dims;  // one per tensor dim
  // 0: every element is in `buffer`. > 0: box-relative dim-0 index i is in
  // buffer `buffer + i * buffer_step` (see above).
  int32_t buffer_step = 0;
};

// The buffer holding box-relative dim-0 index `rel0` of r.
inline int32_t RecordBuffer(const Record& r, int64_t rel0) {
  return r.buffer_step > 0
             ? r.buffer + static_cast<int32_t>(rel0) * r.buffer_step
             : r.buffer;
}

// Calls fn(buffer, part) for the parts of `sub` (global coordinates, inside
// r.box) that each lie in one buffer, in dim-0 order: sub itself when
// r.buffer_step == 0, else one dim-0 slice per buffer.
template <typename Fn>
void ForEachBufferPart(const Record& r, const Box& sub, Fn fn) {
  if (r.buffer_step == 0 || sub.rank() == 0) {
    fn(RecordBuffer(r, sub.rank() == 0 ? 0 : sub.origin(0) - r.box.origin(0)),
       sub);
    return;
  }
  Box::Indices o(sub.origin().begin(), sub.origin().end());
  Box::Indices e(sub.shape().begin(), sub.shape().end());
  e[0] = 1;
  for (int64_t i = 0; i < sub.shape(0); ++i) {
    o[0] = sub.origin(0) + i;
    fn(RecordBuffer(r, o[0] - r.box.origin(0)), Box::Unchecked(o, e));
  }
}

struct SideLayout {
  int32_t world_size = 0;
  std::vector<TensorSpec> tensors;
  std::vector<BufferSpec> buffers;
  std::vector<Record> records;
  // Optional, per rank (empty = unknown): host id, for preferring same-host
  // sources; pipeline stage, for assigning rounds to lanes.
  std::vector<int32_t> host_of_rank;
  std::vector<int32_t> stage_of_rank;
  // Optional, per rank (empty = unknown; needs host_of_rank): GPU id, for
  // the same-GPU link class (plan/cost.h); -1 where a rank's GPU is
  // unknown. Ids are shared by the two sides of a plan: equal ids are one
  // physical GPU, which lies on one host.
  std::vector<int32_t> gpu_of_rank;
};

// The DimMaps of a dense row-major array of `shape` (strides in elements).
using DimMaps = absl::InlinedVector<DimMap, 3>;
DimMaps RowMajorDims(absl::Span<const int64_t> shape);

// Row-major dims of `box_shape` laid inside a larger row-major array whose
// extents are `array_shape` (same rank): strides come from array_shape.
DimMaps SubArrayDims(absl::Span<const int64_t> box_shape,
                                 absl::Span<const int64_t> array_shape);

// Checks one record against its side: indices in range, ranks agree
// (every buffer of an indexed record on the record's rank),
// dims.size() == tensor rank, every split size >= 1 and stride >= 0,
// product of split sizes == box extent, box inside the tensor, and every
// addressed byte inside the buffer. INVALID_ARGUMENT naming the tensor,
// buffer and rank otherwise.
absl::Status ValidateRecord(const SideLayout& side, const Record& r);

// Where tensor `tensor` of `side` lives, for errors: " (rank 1, parameter
// model.layers.0.mlp.down_proj.weight)" from its first record (" (rank 1)"
// when that record's buffer is out of range); "" when it has no record.
std::string TensorPlace(const SideLayout& side, int32_t tensor);

// Element offset (relative to byte_offset / elem_size) of the element at
// box-relative index `rel` in dim d.
int64_t DimOffset(const DimMap& m, int64_t rel);

// A piece of a dim range: indices [index_begin, index_begin + count) of the
// range (relative to the range start) map to offset + mixed radix(splits).
struct DimPiece {
  int64_t index_begin = 0;
  int64_t count = 0;
  int64_t offset = 0;            // elements
  absl::InlinedVector<DimSplit, 2> splits;  // outer to inner, product == count
};

// Cuts the box-relative range [begin, begin + count) of dim map `m` into the
// fewest pieces, in index order, each a regular mixed-radix block; adjacent
// splits that are contiguous (outer.stride == inner.size * inner.stride) are
// merged, so a piece whose splits collapse to one is an arithmetic run.
std::vector<DimPiece> DecomposeRange(const DimMap& m, int64_t begin,
                                     int64_t count);

// If the part `sub` (global coordinates, inside r.box) of record r occupies
// one contiguous byte range of one buffer in row-major order of sub,
// returns it (absolute offsets in buffer RecordBuffer(r, sub.origin(0) -
// r.box.origin(0))); otherwise nullopt. Empty sub: nullopt. A sub spanning
// several buffers of an indexed record: nullopt.
std::optional<ByteRange> ContiguousByteRange(const Record& r,
                                             int64_t elem_size,
                                             const Box& sub);

// The bytes of the buffer that the part `sub` of record r addresses, as
// sorted, merged ranges (absolute buffer offsets). `sub` must lie in one
// buffer (see ForEachBufferPart). Returns at most
// max_ranges + 1 ranges (stops early once exceeded).
std::vector<ByteRange> ByteRuns(const Record& r, int64_t elem_size,
                                const Box& sub, int64_t max_ranges);

}  // namespace refit

#endif  // REFIT_LAYOUT_LAYOUT_H_
