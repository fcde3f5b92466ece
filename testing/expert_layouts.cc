// The per-expert trainer / fused engine layout pair.
#include "testing/expert_layouts.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "layout/box.h"
#include "layout/dtype.h"
#include "layout/sharding.h"

namespace refit::testing {

absl::StatusOr<LayoutPair> GroupedExpertLayouts() {
  const int64_t e = 8, inter = 6, h = 4;
  LayoutPair p;
  SideLayout& src = p.src;
  SideLayout& dst = p.dst;
  src.world_size = 2;  // EP2: experts [4r, 4r + 4) on rank r
  dst.world_size = 2;  // TP2 over the intermediate dim, all experts
  for (SideLayout* s : {&src, &dst}) {
    for (const char* w : {"gate_proj", "up_proj"}) {
      TensorSpec t{absl::StrCat("layers.0.mlp.experts.{}.", w, ".weight"),
                   {e, inter, h}, DType::kF32, /*stacked=*/true};
      REFIT_RETURN_IF_ERROR(AddTensor(*s, t));
    }
  }
  for (int32_t r = 0; r < 2; ++r) {
    for (int64_t j = 0; j < 4; ++j) {
      REFIT_ASSIGN_OR_RETURN(
          int32_t b, AddBuffer(src, r, absl::StrCat("linear_fc1.weight", j),
                               2 * inter * h * 4));
      for (int32_t w = 0; w < 2; ++w) {
        Record rec;
        rec.tensor = w;
        rec.rank = r;
        rec.buffer = b;
        rec.box = Box::Unchecked({4 * r + j, 0, 0}, {1, inter, h});
        rec.byte_offset = w * inter * h * 4;
        rec.dims = RowMajorDims({1, inter, h});
        src.records.push_back(rec);
      }
    }
    REFIT_ASSIGN_OR_RETURN(int32_t c,
                           AddBuffer(dst, r, "w13_weight", e * inter * h * 4));
    for (int32_t w = 0; w < 2; ++w) {
      Record rec;
      rec.tensor = w;
      rec.rank = r;
      rec.buffer = c;
      rec.box = Box::Unchecked({0, r * inter / 2, 0}, {e, inter / 2, h});
      rec.byte_offset = w * inter / 2 * h * 4;
      rec.dims = SubArrayDims({e, inter / 2, h}, {e, inter, h});
      dst.records.push_back(rec);
    }
  }
  return p;
}

}  // namespace refit::testing
