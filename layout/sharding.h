// Sharding: build SideLayout records for DTensor-style layouts.
//
// Conveniences for tests, benchmarks and the mapping layer: given a tensor
// of a SideLayout, a Mesh and one Placement per mesh axis, add the records
// (and, for the dense case, the buffers) that say where every rank's shard
// lives. Shards that are empty (torch.chunk leaves trailing pieces empty)
// get no record and no buffer.
#ifndef REFIT_LAYOUT_SHARDING_H_
#define REFIT_LAYOUT_SHARDING_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "layout/box.h"
#include "layout/layout.h"
#include "layout/mesh.h"
#include "layout/tensor_spec.h"

namespace refit {

// Appends `t` to side.tensors and returns its index. Fails with
// INVALID_ARGUMENT (ValidateTensorSpec) or if the name is already used.
absl::StatusOr<int32_t> AddTensor(SideLayout& side, TensorSpec t);

// Appends a buffer {rank, name, byte_size} and returns its index. Fails with
// INVALID_ARGUMENT if rank is outside [0, world_size) or byte_size < 0.
absl::StatusOr<int32_t> AddBuffer(SideLayout& side, int32_t rank,
                                  std::string name, int64_t byte_size);

// Where one rank's shard goes: buffer index, byte offset of the shard's
// first element, and its DimMaps (empty = row-major of the shard's shape).
struct ShardPlace {
  int32_t buffer = 0;
  int64_t byte_offset = 0;
  DimMaps dims;
};

// Called once per mesh rank with a non-empty shard: (rank, shard box).
using PlaceFn =
    std::function<absl::StatusOr<ShardPlace>(int32_t rank, const Box& box)>;

// Adds one record per mesh rank holding a non-empty shard of tensor
// `tensor` under `placements` (one per mesh axis), placed by `place`.
// Returns the number of records added. Fails with INVALID_ARGUMENT naming
// the tensor if the placements do not fit the mesh/tensor, a mesh rank is
// outside the side's world, `place` fails, or a record fails ValidateRecord.
absl::StatusOr<int> AddShardRecords(SideLayout& side, int32_t tensor,
                                    const Mesh& mesh,
                                    absl::Span<const Placement> placements,
                                    const PlaceFn& place);

// "Each rank holds its shard in its own dense buffer": adds, per mesh rank
// with a non-empty shard, a buffer named `buffer_name` (the tensor's name if
// empty) sized to the shard, and a row-major record filling it. Returns the
// number of records added; fails like AddShardRecords.
absl::StatusOr<int> AddDenseShards(SideLayout& side, int32_t tensor,
                                   const Mesh& mesh,
                                   absl::Span<const Placement> placements,
                                   const std::string& buffer_name = "");

// "The shard lives at byte offset X of a fused buffer": buffer_of_rank(rank)
// gives the buffer index on that rank; the shard is row-major at
// `byte_offset`. Fails like AddShardRecords.
absl::StatusOr<int> AddFusedShards(
    SideLayout& side, int32_t tensor, const Mesh& mesh,
    absl::Span<const Placement> placements,
    const std::function<int32_t(int32_t rank)>& buffer_of_rank,
    int64_t byte_offset);

// The byte size of the largest shard of `shape` (element size esize) under
// `placements` on `mesh`: a convenience for sizing fused buffers.
absl::StatusOr<int64_t> MaxShardBytes(absl::Span<const int64_t> shape,
                                      int64_t esize, const Mesh& mesh,
                                      absl::Span<const Placement> placements);

}  // namespace refit

#endif  // REFIT_LAYOUT_SHARDING_H_
