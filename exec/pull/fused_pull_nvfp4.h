// NVFP4's parts of quantize-on-pull (exec/pull/fused_pull.h), for
// fused_pull.cc only: the trainer's global-amax-only conversion, where an
// item finds its global amax, and an item's region quantized on the host.
#ifndef REFIT_EXEC_PULL_FUSED_PULL_NVFP4_H_
#define REFIT_EXEC_PULL_FUSED_PULL_NVFP4_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "exec/pull/fused_pull.h"
#include "exec/convert/quantize.h"
#include "plan/plan.h"

namespace refit {
namespace fused_pull_internal {

// What the trainer keeps of fused NVFP4 conversion c: the global amaxes,
// one f32 per leading index, in c.to_buffer (resized in *src); no scale
// buffer (no longer scratch in *src).
Conversion Nvfp4GlobalAmaxOnly(const Conversion& c, SideLayout* src);

// (conversion, role) -> the receiver's buffer exported at that position.
using Positions = std::map<std::pair<int32_t, int32_t>, int32_t>;

// NVFP4 items read the BF16 weight at the codes position (role 0) and the
// global amaxes at the scale position (role 1), whichever they write:
// INVALID_ARGUMENT naming the ranks unless both are exported for every
// NVFP4 source of `list` (trainer rank `src`), or a global scale position
// is not one of the pair's `num_positions`.
absl::Status CheckNvfp4Positions(const std::vector<FusedSource>& list, const Positions& position,
                                 int64_t num_positions, int32_t dst_rank, int32_t src);

// Sets where NVFP4 item *it (of source f) finds its leading index's global
// amax: buffer global_buffer, the f32 of its leading index; and, when the
// receiver computes it (f.engine_amax), the global scale scratch among
// the pair's exports `order`.
void SetNvfp4GlobalAmax(const FusedSource& f, int32_t global_buffer,
                        const std::vector<int32_t>& order, FusedItem* it);

// Marks *f (NVFP4 conversion c of the pair exporting `order`) as one whose
// receiver computes the global amax (EngineAmaxConversions), with the
// position of c's global scale scratch.
void SetEngineAmax(const Conversion& c, const std::vector<int32_t>& order, FusedSource* f);

// An NVFP4 item's region `in` quantized on the host with its block amaxes
// and the global amax it reads from its sender's buffers `src`: packed
// codes and e4m3 scale bytes, row-major over the region.
void QuantizeNvfp4Region(const FusedItem& it, const HostDenseBox& in,
                         const std::vector<float>& block_amax,
                         const std::vector<const char*>& src, uint8_t* codes, uint8_t* scales);

}  // namespace fused_pull_internal
}  // namespace refit

#endif  // REFIT_EXEC_PULL_FUSED_PULL_NVFP4_H_
