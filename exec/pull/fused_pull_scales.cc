// CutScaleSources (see fused_pull_scales.h).
#include "exec/pull/fused_pull_scales.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "exec/convert/quantize.h"
#include "layout/layout.h"
#include "plan/conversion.h"

namespace refit {
namespace {

// Record r's element offset over `sub` (inside r.box; one buffer: a
// single dim-0 index of an indexed record) and its stride on sub's
// second-to-last dim, when every dim of r is one arithmetic run there and
// the last is contiguous; nullopt otherwise.
std::optional<std::pair<int64_t, int64_t>> OffsetAndPitch(const Record& r, const Box& sub) {
  if ((r.buffer_step != 0 && sub.shape(0) != 1) ||
      r.dims.size() != static_cast<size_t>(sub.rank())) {
    return std::nullopt;
  }
  const int n = sub.rank();
  int64_t offset = 0, pitch = 0;
  for (int d = 0; d < n; ++d) {
    const std::vector<DimPiece> p =
        DecomposeRange(r.dims[d], sub.origin(d) - r.box.origin(d), sub.shape(d));
    if (p.size() != 1 || p[0].splits.size() > 1) return std::nullopt;
    offset += p[0].offset;
    const int64_t stride = p[0].splits.empty() || sub.shape(d) == 1 ? 0 : p[0].splits[0].stride;
    if (d == n - 1 && sub.shape(d) > 1 && stride != 1) return std::nullopt;
    if (d == n - 2) pitch = stride;
  }
  return std::make_pair(offset, pitch);
}

}  // namespace

CutScaleSources::CutScaleSources(const Plan& slice, int32_t dst_rank)
    : slice_(slice), dst_rank_(dst_rank) {}

absl::Status CutScaleSources::Set(int32_t codes_tensor, FusedItem* it) {
  const std::string& name = slice_.src.tensors[codes_tensor].name;
  const bool mx = it->format == static_cast<int32_t>(QuantFormat::kMxfp8);
  const std::string scale_name = mx ? MxScaleTensorName(name) : ScaleTensorName(name);
  int32_t st = -1;
  for (size_t t = 0; t < slice_.src.tensors.size() && st < 0; ++t) {
    if (slice_.src.tensors[t].name == scale_name) st = static_cast<int32_t>(t);
  }
  auto found = parts_.find(st);
  if (st >= 0 && found == parts_.end()) {
    std::vector<Part>& v = parts_[st];
    for (const Message& m : slice_.messages) {
      if (m.dst_rank != dst_rank_) continue;
      for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
        const Segment& s = slice_.segments[i];
        const Record& r = slice_.src.records[s.src_record];
        if (r.tensor != st) continue;
        ForEachBufferPart(r, s.box, [&](int32_t b, const Box& part) {
          v.push_back({part, s.src_record, b});
        });
      }
    }
    found = parts_.find(st);
  }
  // The item's tiles, in tile coordinates.
  const int n = static_cast<int>(it->where.size());
  std::vector<int64_t> origin = it->where, shape(n, 1);
  const int64_t tr = it->tile_r, tc = it->tile_c;
  origin[n - 2] = it->where[n - 2] / tr;
  origin[n - 1] = it->where[n - 1] / tc;
  shape[n - 2] = (it->where[n - 2] + it->rows - 1) / tr - origin[n - 2] + 1;
  shape[n - 1] = (it->where[n - 1] + it->cols - 1) / tc - origin[n - 1] + 1;
  const Box tiles = Box::Unchecked(origin, shape);
  if (found != parts_.end()) {
    for (const Part& p : found->second) {
      if (!Contains(p.box, tiles)) continue;
      const Record& r = slice_.src.records[p.record];
      const std::optional<std::pair<int64_t, int64_t>> a = OffsetAndPitch(r, tiles);
      if (!a) continue;
      const int64_t es = mx ? 1 : 4;
      it->scale_src_rank = r.rank;
      it->scale_src_buffer = p.buffer;
      it->scale_src_offset = r.byte_offset + es * a->first;
      it->scale_src_pitch = a->second;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "quantize-on-pull of tensor ", name, ": engine rank ", dst_rank_,
      " reads no scale of the cut tiles ", tiles.ToString(), " (", scale_name,
      ") from one trainer record"));
}

namespace {

// The value of an FP8 / MXFP8 scale element of `format` at p (f32, or the
// E8M0 byte's power of two).
float ScaleValue(int32_t format, const char* p) {
  if (format == static_cast<int32_t>(QuantFormat::kMxfp8)) {
    return std::ldexp(1.0f, static_cast<int>(static_cast<unsigned char>(*p)) - 127);
  }
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

}  // namespace

void QuantizeCutItemHost(const FusedItem& it, const uint16_t* dense,
                         const std::vector<const char*>& scale_src, absl::Span<char* const> dst) {
  if (it.dst_buffer < 0) return;
  const int n = static_cast<int>(it.where.size());
  const int64_t es = ScaleElementBytes(static_cast<QuantFormat>(it.format));
  const char* sbase = scale_src[it.scale_src_buffer] + it.scale_src_offset;
  const int64_t tr0 = it.where[n - 2] / it.tile_r, tc0 = it.where[n - 1] / it.tile_c;
  char* out = dst[it.dst_buffer] + it.dst_offset;
  for (int32_t r = it.w_r0; r < it.w_r1; ++r) {
    for (int32_t c = it.w_c0; c < it.w_c1; ++c) {
      const int64_t i = (it.where[n - 2] + r) / it.tile_r - tr0;
      const int64_t j = (it.where[n - 1] + c) / it.tile_c - tc0;
      const float inv = 1.0f / ScaleValue(it.format, sbase + (i * it.scale_src_pitch + j) * es);
      const float x = LoadAsF32(
          DType::kBF16, reinterpret_cast<const char*>(&dense[static_cast<size_t>(r) * it.cols + c]));
      out[(r - it.w_r0) * it.dst_pitch + (c - it.w_c0)] =
          static_cast<char>(F32ToE4M3(std::fmin(std::fmax(x * inv, -448.0f), 448.0f)));
    }
  }
}

}  // namespace refit
