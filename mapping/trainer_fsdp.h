// The HF/FSDP trainer convention (FSDP2 per-parameter sharding, optionally
// hybrid-sharded).
//
// Every logical tensor keeps its HF name and is Shard(0) over the shard
// group with torch.chunk sizes (ChunkOf in layout/mesh.h); a rank whose
// chunk is empty registers no buffer for it. Per-expert tensors are separate
// HF parameters: rank r holds "…experts.<e>.gate_proj.weight" rows chunk(r)
// for every expert e (one buffer and one record per expert). Rank-0 tensors
// (KV-cache scales) are replicated. FP8 weight_scale_inv tensors are
// parameters (buffers) of their own and are chunked independently.
//
// Rank order (HSDP with shard group size S, replicas R = dp / S):
//   rank = replica * S + shard_rank.
#ifndef REFIT_MAPPING_TRAINER_FSDP_H_
#define REFIT_MAPPING_TRAINER_FSDP_H_

#include "absl/status/statusor.h"
#include "mapping/layout_builder.h"
#include "mapping/model_family.h"
#include "mapping/parallel_spec.h"

namespace refit {

// The FSDP layout of `model` under `spec` (spec.kind must be kFsdp).
// INVALID_ARGUMENT if shard does not divide dp.
absl::StatusOr<MappedSide> BuildFsdpLayout(const ModelTensors& model,
                                           const TrainerSpec& spec);

}  // namespace refit

#endif  // REFIT_MAPPING_TRAINER_FSDP_H_
