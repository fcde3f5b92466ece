// Quantize-on-pull of records that cut tiles (exec/pull/fused_pull.h): where a
// receiver reads the scales of the tiles such a record cuts. Their trainer
// owners write them into scale scratch buffers, which the receiver pulls
// as plain copies; its codes items read them from the same place.
#ifndef REFIT_EXEC_PULL_FUSED_PULL_SCALES_H_
#define REFIT_EXEC_PULL_FUSED_PULL_SCALES_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "exec/pull/fused_pull.h"
#include "layout/box.h"
#include "plan/plan.h"

namespace refit {

// The scale segments engine rank `dst_rank` reads (from any trainer rank),
// by source scale tensor, to point cut items at their scales.
class CutScaleSources {
 public:
  CutScaleSources(const Plan& slice, int32_t dst_rank);

  // Sets it.scale_src_* for an item of a cut conversion (FusedSource::cut)
  // whose codes are of slice.src tensor `codes_tensor`: the scale tensor of
  // the item's format (plan/conversion.h's names), the part of a segment this
  // receiver reads whose box holds every tile of the item's region, affine
  // over them. INVALID_ARGUMENT naming the tensor when there is none (the
  // receiver holds no scale of a cut tile it holds codes of).
  absl::Status Set(int32_t codes_tensor, FusedItem* it);

 private:
  struct Part {
    Box box;  // tile coordinates
    int32_t record = 0;
    int32_t buffer = 0;
  };
  const Plan& slice_;
  int32_t dst_rank_;
  std::map<int32_t, std::vector<Part>> parts_;  // by scale tensor, built on first use
};

// RunFusedItemsHost's codes of an item with scale_src_buffer >= 0: the
// region's BF16 `dense` (row-major, it.rows x it.cols), each tile's scale
// read from scale_src[it.scale_src_buffer] (the scale sender's exported
// buffers), the codes written to dst[it.dst_buffer] (if any).
void QuantizeCutItemHost(const FusedItem& it, const uint16_t* dense,
                         const std::vector<const char*>& scale_src, absl::Span<char* const> dst);

}  // namespace refit

#endif  // REFIT_EXEC_PULL_FUSED_PULL_SCALES_H_
