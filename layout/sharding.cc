// Sharding helpers: records for DTensor-style layouts (see sharding.h).
#include "layout/sharding.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "layout/dtype.h"

namespace refit {

absl::StatusOr<int32_t> AddTensor(SideLayout& side, TensorSpec t) {
  REFIT_RETURN_IF_ERROR(ValidateTensorSpec(t));
  for (const TensorSpec& u : side.tensors) {
    if (u.name == t.name) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name, " is already in the layout"));
    }
  }
  side.tensors.push_back(std::move(t));
  return static_cast<int32_t>(side.tensors.size() - 1);
}

absl::StatusOr<int32_t> AddBuffer(SideLayout& side, int32_t rank,
                                  std::string name, int64_t byte_size) {
  if (rank < 0 || rank >= side.world_size || byte_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer ", name, " on rank ", rank, " of size ",
                     byte_size, ": rank outside the world of ",
                     side.world_size, " or negative size"));
  }
  BufferSpec b;
  b.rank = rank;
  b.name = std::move(name);
  b.byte_size = byte_size;
  side.buffers.push_back(std::move(b));
  return static_cast<int32_t>(side.buffers.size() - 1);
}

absl::StatusOr<int> AddShardRecords(SideLayout& side, int32_t tensor,
                                    const Mesh& mesh,
                                    absl::Span<const Placement> placements,
                                    const PlaceFn& place) {
  if (tensor < 0 || tensor >= static_cast<int32_t>(side.tensors.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("no tensor with index ", tensor));
  }
  const std::string name = side.tensors[tensor].name;
  const std::vector<int64_t> shape = side.tensors[tensor].shape;
  int added = 0;
  for (int64_t i = 0; i < mesh.size(); ++i) {
    std::vector<int64_t> coord = mesh.CoordOf(i);
    absl::StatusOr<Box> box =
        ShardBox(shape, mesh.axis_sizes(), placements, coord);
    if (!box.ok()) return AnnotateStatus(box.status(), "tensor " + name);
    if (IsEmpty(*box)) continue;
    const int32_t rank = mesh.ranks()[i];
    absl::StatusOr<ShardPlace> p = place(rank, *box);
    if (!p.ok()) {
      return AnnotateStatus(p.status(),
                            absl::StrCat("tensor ", name, " rank ", rank));
    }
    Record r;
    r.tensor = tensor;
    r.rank = rank;
    r.buffer = p->buffer;
    r.box = *box;
    r.byte_offset = p->byte_offset;
    r.dims = p->dims.empty() ? RowMajorDims(box->shape()) : p->dims;
    REFIT_RETURN_IF_ERROR(ValidateRecord(side, r));
    side.records.push_back(std::move(r));
    ++added;
  }
  return added;
}

absl::StatusOr<int> AddDenseShards(SideLayout& side, int32_t tensor,
                                   const Mesh& mesh,
                                   absl::Span<const Placement> placements,
                                   const std::string& buffer_name) {
  if (tensor < 0 || tensor >= static_cast<int32_t>(side.tensors.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("no tensor with index ", tensor));
  }
  const int64_t es = DTypeSize(side.tensors[tensor].dtype);
  const std::string bname =
      buffer_name.empty() ? side.tensors[tensor].name : buffer_name;
  return AddShardRecords(
      side, tensor, mesh, placements,
      [&](int32_t rank, const Box& box) -> absl::StatusOr<ShardPlace> {
        REFIT_ASSIGN_OR_RETURN(int64_t n, NumElements(box));
        int64_t bytes;
        if (!CheckedMul(n, es, &bytes)) {
          return absl::InvalidArgumentError("shard byte size overflows");
        }
        ShardPlace p;
        REFIT_ASSIGN_OR_RETURN(p.buffer, AddBuffer(side, rank, bname, bytes));
        return p;
      });
}

absl::StatusOr<int> AddFusedShards(
    SideLayout& side, int32_t tensor, const Mesh& mesh,
    absl::Span<const Placement> placements,
    const std::function<int32_t(int32_t rank)>& buffer_of_rank,
    int64_t byte_offset) {
  return AddShardRecords(
      side, tensor, mesh, placements,
      [&](int32_t rank, const Box&) -> absl::StatusOr<ShardPlace> {
        ShardPlace p;
        p.buffer = buffer_of_rank(rank);
        p.byte_offset = byte_offset;
        return p;
      });
}

absl::StatusOr<int64_t> MaxShardBytes(absl::Span<const int64_t> shape,
                                      int64_t esize, const Mesh& mesh,
                                      absl::Span<const Placement> placements) {
  int64_t best = 0;
  for (int64_t i = 0; i < mesh.size(); ++i) {
    REFIT_ASSIGN_OR_RETURN(
        Box box, ShardBox(shape, mesh.axis_sizes(), placements, mesh.CoordOf(i)));
    REFIT_ASSIGN_OR_RETURN(int64_t n, NumElements(box));
    int64_t bytes;
    if (!CheckedMul(n, esize, &bytes)) {
      return absl::InvalidArgumentError("shard byte size overflows");
    }
    best = std::max(best, bytes);
  }
  return best;
}

}  // namespace refit
