// Mesh and placements, in PyTorch DTensor's vocabulary.
//
// A Mesh is an N-d array of ranks with named axes (e.g. {"pp","dp","tp"}).
// Each mesh axis places a tensor either as Shard(dim) or Replicate. Several
// axes may shard the same tensor dim: they nest in mesh-axis order (the
// first axis splits the dim, the next splits each piece again), as DTensor
// does by default.
//
// Uneven sizes follow torch.chunk, written down once here (ChunkOf):
//   chunk = ceil(extent / n); piece i covers [i*chunk, min((i+1)*chunk, extent))
//   clipped to be empty when i*chunk >= extent.
// So for extent 10 over 4: sizes 3,3,3,1; extent 5 over 4: 2,2,1,0;
// extent 2 over 4: 1,1,0,0. Trailing pieces may be smaller or empty.
#ifndef REFIT_LAYOUT_MESH_H_
#define REFIT_LAYOUT_MESH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "layout/box.h"

namespace refit {

struct Placement {
  enum class Kind { kShard, kReplicate };
  Kind kind = Kind::kReplicate;
  int dim = -1;  // the tensor dim for kShard

  static Placement Shard(int d) { return {Kind::kShard, d}; }
  static Placement Replicate() { return {Kind::kReplicate, -1}; }
  bool is_shard() const { return kind == Kind::kShard; }
  std::string ToString() const;  // "Shard(0)" / "Replicate()"
  friend bool operator==(const Placement& a, const Placement& b) {
    return a.kind == b.kind && a.dim == b.dim;
  }
};

// [begin, begin + size) of piece i of `extent` cut into n by torch.chunk.
struct ChunkRange {
  int64_t begin = 0;
  int64_t size = 0;
};

// The torch.chunk rule above. Requires extent >= 0, n >= 1, 0 <= i < n
// (debug-checked; validate with Mesh/ShardBox first).
ChunkRange ChunkOf(int64_t extent, int64_t n, int64_t i);

class Mesh {
 public:
  Mesh() = default;

  // A mesh with the given axes; `ranks` lists the rank at each coordinate in
  // row-major order (empty: ranks 0..N-1 in order).
  // Fails with INVALID_ARGUMENT if names and sizes differ in count, a size is
  // < 1, names repeat, the product overflows, or ranks has the wrong length,
  // a negative or a repeated entry.
  static absl::StatusOr<Mesh> Make(std::vector<std::string> axis_names,
                                   std::vector<int64_t> axis_sizes,
                                   std::vector<int32_t> ranks = {});

  int num_axes() const { return static_cast<int>(sizes_.size()); }
  int64_t size() const { return static_cast<int64_t>(ranks_.size()); }
  absl::Span<const std::string> axis_names() const { return names_; }
  absl::Span<const int64_t> axis_sizes() const { return sizes_; }
  absl::Span<const int32_t> ranks() const { return ranks_; }

  // Index of the axis with this name, or -1.
  int AxisIndex(absl::string_view name) const;

  // The coordinate of the flat (row-major) position `index`.
  std::vector<int64_t> CoordOf(int64_t index) const;
  // Rank at a coordinate (debug-checked bounds).
  int32_t RankAt(absl::Span<const int64_t> coord) const;

 private:
  std::vector<std::string> names_;
  std::vector<int64_t> sizes_;
  std::vector<int32_t> ranks_;
};

// The box of `global_shape` held at mesh coordinate `coord` under
// `placements` (one per mesh axis). Fails with INVALID_ARGUMENT if the
// counts differ, a Shard dim is out of range, or the coordinate is out of
// the mesh.
absl::StatusOr<Box> ShardBox(absl::Span<const int64_t> global_shape,
                             absl::Span<const int64_t> mesh_sizes,
                             absl::Span<const Placement> placements,
                             absl::Span<const int64_t> coord);

}  // namespace refit

#endif  // REFIT_LAYOUT_MESH_H_
