#include "layout/mesh.h"

#include <cassert>
#include <set>

#include "absl/strings/str_cat.h"

namespace refit {

std::string Placement::ToString() const {
  if (kind == Kind::kShard) return absl::StrCat("Shard(", dim, ")");
  return "Replicate()";
}

ChunkRange ChunkOf(int64_t extent, int64_t n, int64_t i) {
  assert(extent >= 0 && n >= 1 && i >= 0 && i < n);
  int64_t chunk = extent / n + (extent % n != 0 ? 1 : 0);
  ChunkRange r;
  int64_t begin = chunk * i;  // chunk * i <= extent + n: no overflow
  if (begin >= extent) {
    r.begin = extent;
    r.size = 0;
    return r;
  }
  r.begin = begin;
  r.size = std::min(chunk, extent - begin);
  return r;
}

absl::StatusOr<Mesh> Mesh::Make(std::vector<std::string> axis_names,
                                std::vector<int64_t> axis_sizes,
                                std::vector<int32_t> ranks) {
  if (axis_names.size() != axis_sizes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mesh has ", axis_names.size(), " axis names but ",
                     axis_sizes.size(), " axis sizes"));
  }
  std::set<std::string> seen;
  int64_t total = 1;
  for (size_t a = 0; a < axis_sizes.size(); ++a) {
    if (axis_sizes[a] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh axis \"", axis_names[a], "\" has size ",
                       axis_sizes[a], "; sizes must be >= 1"));
    }
    if (!seen.insert(axis_names[a]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh axis name \"", axis_names[a], "\" repeats"));
    }
    if (!CheckedMul(total, axis_sizes[a], &total) || total > (1LL << 31)) {
      return absl::InvalidArgumentError("mesh has more than 2^31 positions");
    }
  }
  if (ranks.empty()) {
    ranks.resize(total);
    for (int64_t i = 0; i < total; ++i) ranks[i] = static_cast<int32_t>(i);
  } else {
    if (static_cast<int64_t>(ranks.size()) != total) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh of ", total, " positions was given ",
                       ranks.size(), " ranks"));
    }
    std::set<int32_t> used;
    for (int32_t r : ranks) {
      if (r < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("mesh rank ", r, " is negative"));
      }
      if (!used.insert(r).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("mesh rank ", r, " appears twice"));
      }
    }
  }
  Mesh m;
  m.names_ = std::move(axis_names);
  m.sizes_ = std::move(axis_sizes);
  m.ranks_ = std::move(ranks);
  return m;
}

int Mesh::AxisIndex(absl::string_view name) const {
  for (size_t a = 0; a < names_.size(); ++a) {
    if (names_[a] == name) return static_cast<int>(a);
  }
  return -1;
}

std::vector<int64_t> Mesh::CoordOf(int64_t index) const {
  std::vector<int64_t> coord(sizes_.size());
  for (int a = static_cast<int>(sizes_.size()) - 1; a >= 0; --a) {
    coord[a] = index % sizes_[a];
    index /= sizes_[a];
  }
  return coord;
}

int32_t Mesh::RankAt(absl::Span<const int64_t> coord) const {
  assert(coord.size() == sizes_.size());
  int64_t index = 0;
  for (size_t a = 0; a < sizes_.size(); ++a) {
    assert(coord[a] >= 0 && coord[a] < sizes_[a]);
    index = index * sizes_[a] + coord[a];
  }
  return ranks_[index];
}

absl::StatusOr<Box> ShardBox(absl::Span<const int64_t> global_shape,
                             absl::Span<const int64_t> mesh_sizes,
                             absl::Span<const Placement> placements,
                             absl::Span<const int64_t> coord) {
  if (placements.size() != mesh_sizes.size() ||
      coord.size() != mesh_sizes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh has ", mesh_sizes.size(), " axes but ", placements.size(),
        " placements and a coordinate of ", coord.size()));
  }
  std::vector<int64_t> origin(global_shape.size(), 0);
  std::vector<int64_t> shape(global_shape.begin(), global_shape.end());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor shape[", d, "] = ", shape[d], " is negative"));
    }
  }
  for (size_t a = 0; a < mesh_sizes.size(); ++a) {
    if (coord[a] < 0 || coord[a] >= mesh_sizes[a]) {
      return absl::InvalidArgumentError(
          absl::StrCat("coordinate ", coord[a], " is outside mesh axis ", a,
                       " of size ", mesh_sizes[a]));
    }
    const Placement& p = placements[a];
    if (!p.is_shard()) continue;
    if (p.dim < 0 || p.dim >= static_cast<int>(shape.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement Shard(", p.dim, ") on mesh axis ", a,
                       " is outside a tensor of rank ", shape.size()));
    }
    ChunkRange c = ChunkOf(shape[p.dim], mesh_sizes[a], coord[a]);
    origin[p.dim] += c.begin;
    shape[p.dim] = c.size;
  }
  return Box::Make(origin, shape);
}

}  // namespace refit
