// One pass: which of a plan's block conversions the colocated pull path
// runs in one pass. There an engine rank reads its trainer's BF16 weight
// and writes the FP8 / MXFP8 / NVFP4 codes and scales straight into its
// own buffers while it pulls (exec/pull/fused_pull.h); the other
// conversions run in two passes: the trainer quantizes into scratch
// buffers (plan/conversion.h), the engine pulls them.
//
// A conversion runs in one pass when (pure arithmetic over the plan):
//   - it quantizes to a format row with row-major scales (FP8 128 x 128
//     tiles, kFp8BlockUe8m0, kFp8BlockRequantUe8m0, MXFP8 1 x 32, NVFP4
//     1 x 16 of ModelOpt's recipe; vLLM's NVFP4 recipe never) from a BF16 record of rank <= 4
//     with at most two splits per dim;
//   - its record owns tiles (it has a scale scratch), or cuts tiles that
//     other trainer records hold the rest of (FSDP's flat shards, a TP cut
//     through a tile), except for the DeepGEMM requantization and NVFP4,
//     whose cut tiles keep two passes;
//   - for some cell (cell_rows x cell_cols elements, aligned to multiples
//     of it in the tensor, from 128 x 128 down to 1 x 32 in steps that
//     keep whole tiles; one block column for cut 1 x 32 blocks) the source
//     record and every destination record reading its codes (and its
//     scales, unless it cuts tiles) are affine over every cell (one stride
//     per dim there, the last 1); NVFP4's codes and scales are read by the
//     same engine ranks.
// The planner records the largest such cell, rows first, in the conversion
// (Conversion::one_pass); the pull path reads it there. The decision holds
// for pairs that pull: a conversion whose scratch an engine rank on
// another host reads (over the network) runs in two passes on its trainer.
#ifndef REFIT_PLAN_ONE_PASS_H_
#define REFIT_PLAN_ONE_PASS_H_

#include <cstdint>
#include <vector>

#include "plan/conversion.h"
#include "plan/plan.h"

namespace refit {

// The largest tensor rank a one-pass conversion may have, and the splits
// its source record may have per dim (what the pull path's items carry).
inline constexpr int kOnePassMaxRank = 4;
inline constexpr int kOnePassMaxSplits = 2;

// Whether `tile` is one the one-pass kernels run: 1 on every leading dim
// and the FP8 row's 128 x 128, or 1 x 32 (MXFP8), 1 x 16 (NVFP4) on the
// last two; rank 2..kOnePassMaxRank.
bool IsOnePassTile(const std::vector<int64_t>& tile);

// Whether c's record cuts tiles on its last two dims: it holds part of a
// tile whose rest other records hold. False when c's tensor or tile does
// not fit the plan (nothing to cut).
bool CutsTiles(const Plan& plan, const Conversion& c);

// Sets one_pass, one_pass_cell_rows and one_pass_cell_cols of every
// conversion of `plan` (a whole plan, its messages emitted) by the rule
// above; the others get false, 0, 0. BuildPlan calls it before the
// fingerprint.
void DecideOnePass(Plan* plan);

}  // namespace refit

#endif  // REFIT_PLAN_ONE_PASS_H_
