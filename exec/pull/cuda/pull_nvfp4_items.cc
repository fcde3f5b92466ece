// ResolveNvfp4Items (see pull_nvfp4_items.h).
#include "exec/pull/cuda/pull_nvfp4_items.h"

#include "absl/strings/str_cat.h"
#include "plan/conversion.h"

namespace refit {

bool IsNvfp4Item(const FusedItem& item) {
  return item.format == static_cast<int32_t>(QuantFormat::kNvfp4);
}

absl::StatusOr<std::vector<cuda::PullNvfp4Item>> ResolveNvfp4Items(
    absl::Span<const FusedItem> items, const std::map<int32_t, std::vector<char*>>& src,
    absl::Span<char* const> dst) {
  std::vector<cuda::PullNvfp4Item> out;
  out.reserve(items.size());
  auto own = [&](int32_t b) -> char* {
    return b >= 0 && b < static_cast<int32_t>(dst.size()) ? dst[b] : nullptr;
  };
  for (const FusedItem& it : items) {
    auto s = src.find(it.src_rank);
    auto from = [&](int32_t b) -> char* {
      return s != src.end() && b >= 0 && b < static_cast<int32_t>(s->second.size())
                 ? s->second[b]
                 : nullptr;
    };
    if (!IsNvfp4Item(it) || it.tile_r != 1 || it.tile_c != kNvfp4Block || it.cols % kNvfp4Block != 0 ||
        from(it.src_buffer) == nullptr || from(it.global_buffer) == nullptr ||
        (it.dst_buffer >= 0 && own(it.dst_buffer) == nullptr) ||
        (it.scale_buffer >= 0 && own(it.scale_buffer) == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NVFP4 quantize-on-pull: a buffer of trainer rank ", it.src_rank, " (#",
          it.src_buffer, ", #", it.global_buffer, ") or of this receiver (#", it.dst_buffer,
          ", #", it.scale_buffer, ") is missing, or the item is not an NVFP4 one"));
    }
    cuda::PullNvfp4Item d{};
    d.src = from(it.src_buffer) + it.src_offset;
    d.dst = it.dst_buffer >= 0
                ? reinterpret_cast<unsigned char*>(own(it.dst_buffer)) + it.dst_offset
                : nullptr;
    d.scales = it.scale_buffer >= 0
                   ? reinterpret_cast<unsigned char*>(own(it.scale_buffer)) + it.scale_offset
                   : nullptr;
    d.global_amax = reinterpret_cast<const float*>(from(it.global_buffer) + it.global_offset);
    CopyRegion(it, &d);
    d.vec = cuda::PullNvfp4VectorOk(d) ? 1 : 0;
    out.push_back(d);
  }
  return out;
}

}  // namespace refit
