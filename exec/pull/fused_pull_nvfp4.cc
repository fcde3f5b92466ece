// NVFP4's parts of quantize-on-pull (see fused_pull_nvfp4.h).
#include "exec/pull/fused_pull_nvfp4.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "exec/convert/nvfp4.h"
#include "plan/conversion.h"

namespace refit {
namespace fused_pull_internal {

Conversion Nvfp4GlobalAmaxOnly(const Conversion& c, SideLayout* src) {
  Conversion g = c;
  if (c.scale_buffer >= 0 && c.scale_buffer < static_cast<int32_t>(src->buffers.size())) {
    src->buffers[c.scale_buffer].scratch = false;
  }
  g.scale_buffer = -1;
  src->buffers[c.to_buffer].byte_size = 4 * UncheckedNumElements(LeadingBox(c.from.box));
  return g;
}

absl::Status CheckNvfp4Positions(const std::vector<FusedSource>& list, const Positions& position,
                                 int32_t dst_rank, int32_t src) {
  for (const FusedSource& f : list) {
    if (f.kind != static_cast<int32_t>(ConversionKind::kNvfp4)) continue;
    if (position.count({f.conversion, 0}) == 0 || position.count({f.conversion, 1}) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine rank ", dst_rank, ": trainer rank ", src, " exports only part of an NVFP4 "
          "quantize-on-pull source (the two members hold different plans)"));
    }
  }
  return absl::OkStatus();
}

void SetNvfp4GlobalAmax(const FusedSource& f, int32_t global_buffer, FusedItem* it) {
  it->global_buffer = global_buffer;
  int64_t lead = 0;
  for (int d = 0; d + 2 < f.rank; ++d) lead = lead * f.shape[d] + (it->where[d] - f.origin[d]);
  it->global_offset = 4 * lead;
}

void QuantizeNvfp4Region(const FusedItem& it, const HostDenseBox& in,
                         const std::vector<float>& block_amax,
                         const std::vector<const char*>& src, uint8_t* codes, uint8_t* scales) {
  float global_amax;
  std::memcpy(&global_amax, src[it.global_buffer] + it.global_offset, 4);
  QuantizeNvfp4Host(in, block_amax, {Nvfp4GlobalScale(global_amax)}, codes, scales);
}

}  // namespace fused_pull_internal
}  // namespace refit
