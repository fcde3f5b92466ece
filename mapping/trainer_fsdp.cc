#include "mapping/trainer_fsdp.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "layout/mesh.h"

namespace refit {

absl::StatusOr<MappedSide> BuildFsdpLayout(const ModelTensors& model,
                                           const TrainerSpec& spec) {
  if (spec.kind != TrainerSpec::Kind::kFsdp) {
    return absl::InvalidArgumentError("BuildFsdpLayout: not an fsdp spec");
  }
  const std::string side = absl::StrCat("trainer ", TrainerSpecString(spec));
  const int32_t world = spec.dp;
  const int64_t group = spec.shard > 0 ? spec.shard : spec.dp;
  if (world % group != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        side, ": shard=", group, " must divide dp=", world));
  }
  LayoutBuilder b(model, world, side, /*derive_scales=*/false);
  for (int32_t rank = 0; rank < world; ++rank) {
    const int64_t s = rank % group;
    if (rank >= group) {  // HSDP: shard groups repeat the first one
      REFIT_RETURN_IF_ERROR(b.CloneRank(static_cast<int32_t>(s), rank));
      continue;
    }
    for (int32_t t = 0; t < static_cast<int32_t>(model.tensors.size()); ++t) {
      const TensorSpec& spec_t = model.tensors[t];
      const std::vector<int64_t>& sh = spec_t.shape;
      if (sh.empty()) {
        REFIT_ASSIGN_OR_RETURN(int32_t buf, b.Buffer(rank, spec_t.name, {}, t));
        REFIT_RETURN_IF_ERROR(b.PlaceAt(t, buf, Box(), {}));
        continue;
      }
      if (spec_t.stacked && sh.size() == 1) {
        // Per-expert scalars (per-tensor FP8 scales): replicated.
        for (int64_t e = 0; e < sh[0]; ++e) {
          REFIT_ASSIGN_OR_RETURN(int32_t buf,
                                 b.Buffer(rank, MemberName(spec_t, e), {}, t));
          REFIT_RETURN_IF_ERROR(b.PlaceAt(t, buf, MakeBox({e}, {1}), {0}));
        }
        continue;
      }
      // The dim FSDP shards: dim 0 of the HF tensor (dim 1 of a stack).
      const size_t d = spec_t.stacked ? 1 : 0;
      const ChunkRange chunk = ChunkOf(sh[d], group, s);
      if (chunk.size == 0) continue;
      std::vector<int64_t> local(sh.begin() + d, sh.end());
      local[0] = chunk.size;
      std::vector<int64_t> origin(sh.size(), 0), extent = sh;
      origin[d] = chunk.begin;
      extent[d] = chunk.size;
      const std::vector<int64_t> at(sh.size(), 0);
      if (!spec_t.stacked) {
        REFIT_ASSIGN_OR_RETURN(int32_t buf, b.Buffer(rank, spec_t.name, local, t));
        REFIT_RETURN_IF_ERROR(b.PlaceAt(t, buf, MakeBox(origin, extent), at));
        continue;
      }
      for (int64_t e = 0; e < sh[0]; ++e) {
        REFIT_ASSIGN_OR_RETURN(int32_t buf,
                               b.Buffer(rank, MemberName(spec_t, e), local, t));
        origin[0] = e;
        extent[0] = 1;
        REFIT_RETURN_IF_ERROR(b.PlaceAt(t, buf, MakeBox(origin, extent), at));
      }
    }
  }
  b.SetStage(std::vector<int32_t>(world, 0));
  b.SetHosts(spec.gpus_per_host);
  return std::move(b).Finish();
}

}  // namespace refit
