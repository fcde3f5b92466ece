// ResolveFusedItems (see fused_pull_items.h).
#include "exec/pull/cuda/fused_pull_items.h"

#include "absl/strings/str_cat.h"
#include "exec/convert/quantize.h"

namespace refit {

absl::StatusOr<std::vector<cuda::PullQuantItem>> ResolveFusedItems(
    absl::Span<const FusedItem> items, const std::map<int32_t, std::vector<char*>>& src,
    absl::Span<char* const> dst) {
  std::vector<cuda::PullQuantItem> out;
  out.reserve(items.size());
  auto own = [&](int32_t b) -> char* {
    return b >= 0 && b < static_cast<int32_t>(dst.size()) ? dst[b] : nullptr;
  };
  for (const FusedItem& it : items) {
    auto s = src.find(it.src_rank);
    char* from = s != src.end() && it.src_buffer >= 0 &&
                         it.src_buffer < static_cast<int32_t>(s->second.size())
                     ? s->second[it.src_buffer]
                     : nullptr;
    const char* scale_from = nullptr;  // a cut tile's scale, in its owner's scratch
    if (it.scale_src_buffer >= 0) {
      auto o = src.find(it.scale_src_rank);
      if (o != src.end() && it.scale_src_buffer < static_cast<int32_t>(o->second.size()) &&
          o->second[it.scale_src_buffer] != nullptr) {
        scale_from = o->second[it.scale_src_buffer] + it.scale_src_offset;
      }
    }
    if (from == nullptr || (it.dst_buffer >= 0 && own(it.dst_buffer) == nullptr) ||
        (it.scale_buffer >= 0 && own(it.scale_buffer) == nullptr) ||
        (it.scale_src_buffer >= 0 && scale_from == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "quantize-on-pull: a buffer of trainer rank ", it.src_rank, " (#", it.src_buffer,
          "; scales #", it.scale_src_buffer, " of trainer rank ", it.scale_src_rank,
          ") or of this receiver (#", it.dst_buffer, ", #", it.scale_buffer, ") is missing"));
    }
    cuda::PullQuantItem d{};
    d.src = from + it.src_offset;
    d.dst = it.dst_buffer >= 0 ? reinterpret_cast<unsigned char*>(own(it.dst_buffer)) +
                                     it.dst_offset
                               : nullptr;
    d.scales = it.scale_buffer >= 0 ? reinterpret_cast<unsigned char*>(own(it.scale_buffer)) +
                                          it.scale_offset
                                    : nullptr;
    d.scale_src = reinterpret_cast<const unsigned char*>(scale_from);
    d.scale_src_pitch = it.scale_src_pitch;
    CopyRegion(it, &d);
    d.mode = static_cast<int32_t>(
        ScaleModeOf(static_cast<QuantFormat>(it.format), ScaleSwizzle::kRowMajor));
    d.tile_r = it.tile_r;
    d.tile_c = it.tile_c;
    d.vec = cuda::PullQuantVectorOk(d) ? 1 : 0;
    out.push_back(d);
  }
  return out;
}

}  // namespace refit
