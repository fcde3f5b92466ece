// NVFP4's parts of quantize-on-pull (see fused_pull_nvfp4.h).
#include "exec/pull/fused_pull_nvfp4.h"

#include <cstring>
#include <map>
#include <set>

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
                                 int64_t num_positions, int32_t dst_rank, int32_t src) {
  for (const FusedSource& f : list) {
    if (f.format != static_cast<int32_t>(QuantFormat::kNvfp4)) continue;
    if (position.count({f.conversion, 0}) == 0 || position.count({f.conversion, 1}) == 0 ||
        (f.engine_amax != 0 && f.engine_amax != 1) || f.scale2_position < -1 ||
        f.scale2_position >= num_positions) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine rank ", dst_rank, ": trainer rank ", src, " exports only part of an NVFP4 "
          "quantize-on-pull source (the two members hold different plans)"));
    }
  }
  return absl::OkStatus();
}

void SetNvfp4GlobalAmax(const FusedSource& f, int32_t global_buffer,
                        const std::vector<int32_t>& order, FusedItem* it) {
  it->global_buffer = global_buffer;
  int64_t lead = 0;
  for (int d = 0; d + 2 < f.rank; ++d) lead = lead * f.shape[d] + (it->where[d] - f.origin[d]);
  it->global_offset = 4 * lead;
  it->engine_amax = f.engine_amax;
  it->amax_group = f.engine_amax == 1 ? f.amax_group : -1;
  it->scale2_buffer = f.engine_amax == 1 && f.scale2_position >= 0 ? order[f.scale2_position] : -1;
}

void SetEngineAmax(const Conversion& c, const std::vector<int32_t>& order, FusedSource* f) {
  f->engine_amax = 1;
  f->amax_group = c.global_tensor;
  f->scale2_position = -1;
  for (size_t p = 0; p < order.size(); ++p) {
    if (c.global_buffer >= 0 && order[p] == c.global_buffer) {
      f->scale2_position = static_cast<int32_t>(p);
    }
  }
}

void QuantizeNvfp4Region(const FusedItem& it, const HostDenseBox& in,
                         const std::vector<float>& block_amax,
                         const std::vector<const char*>& src, uint8_t* codes, uint8_t* scales) {
  float global_amax;
  std::memcpy(&global_amax, src[it.global_buffer] + it.global_offset, 4);
  QuantizeNvfp4Host(in, block_amax, {Nvfp4GlobalScale(global_amax)}, codes, scales);
}

}  // namespace fused_pull_internal

std::set<int32_t> EngineAmaxConversions(const Plan& slice, int32_t rank,
                                        const std::set<int32_t>& fused) {
  // Per conversion: how many codes each engine rank reads of it, and its
  // codes' record elements (-1: not one record in one buffer).
  std::map<int32_t, std::map<int32_t, int64_t>> read;
  std::map<int32_t, int64_t> whole;
  std::map<int32_t, int32_t> by_codes;  // to_buffer -> conversion
  for (int32_t i : fused) by_codes[slice.conversions[i].to_buffer] = i;
  for (const Message& m : slice.messages) {
    if (m.relay || m.src_rank != rank) continue;
    for (int32_t k = m.first_segment; k < m.first_segment + m.num_segments; ++k) {
      const Segment& s = slice.segments[k];
      const Record& r = slice.src.records[s.src_record];
      auto c = by_codes.find(RecordBuffer(r, 0));
      if (c == by_codes.end()) continue;
      const int64_t n = r.buffer_step != 0 ? -1 : UncheckedNumElements(r.box);
      auto [w, fresh] = whole.emplace(c->second, n);
      if (!fresh && w->second != n) w->second = -1;
      read[c->second][m.dst_rank] += UncheckedNumElements(s.box);
    }
  }
  // Per parameter (global scale tensor): whether it qualifies, and the
  // engine ranks reading it.
  std::map<int32_t, bool> ok;
  std::map<int32_t, std::set<int32_t>> readers;
  for (const Conversion& c : slice.conversions) {
    if (!QuantizesTo(c, QuantFormat::kNvfp4)) continue;
    const int32_t i = static_cast<int32_t>(&c - slice.conversions.data());
    auto [q, fresh] = ok.emplace(c.global_tensor, true);
    bool good = c.from.rank == rank && fused.count(i) > 0 && whole.count(i) > 0 &&
                whole[i] >= 0;
    std::set<int32_t> who;
    for (const auto& [dst, n] : read[i]) {
      good = good && n == whole[i];
      who.insert(dst);
    }
    auto [r, first] = readers.emplace(c.global_tensor, who);
    q->second = q->second && good && !who.empty() && (first || r->second == who);
  }
  for (const CutTileGroup& g : slice.cut_tiles) {
    if (ok.count(g.tensor) > 0 && g.ranks != std::vector<int32_t>{rank}) ok[g.tensor] = false;
  }
  std::set<int32_t> out;
  for (int32_t i : fused) {
    const Conversion& c = slice.conversions[i];
    if (QuantizesTo(c, QuantFormat::kNvfp4) && ok[c.global_tensor]) out.insert(i);
  }
  return out;
}

}  // namespace refit
