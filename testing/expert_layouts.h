// A small trainer/engine layout pair with Megatron TEGroupedMLP's per-expert
// buffers on the trainer side, for tests of the planner (indexed records)
// and of the copy programs that execute such plans.
#ifndef REFIT_TESTING_EXPERT_LAYOUTS_H_
#define REFIT_TESTING_EXPERT_LAYOUTS_H_

#include "absl/status/statusor.h"
#include "layout/layout.h"

namespace refit::testing {

struct LayoutPair {
  SideLayout src;  // trainer
  SideLayout dst;  // engine
};

// Two stacked f32 tensors layers.0.mlp.experts.{}.{gate,up}_proj.weight of
// shape [8, 6, 4]. Trainer: 2 ranks, EP2 (experts [4r, 4r + 4) on rank r),
// one buffer per local expert holding both weights (16 one-expert
// records). Engine: 2 ranks, TP2 over the intermediate dim, all experts in
// one fused w13 buffer per rank. Returns the pair; fails only if building a
// side fails (with that error).
absl::StatusOr<LayoutPair> GroupedExpertLayouts();

}  // namespace refit::testing

#endif  // REFIT_TESTING_EXPERT_LAYOUTS_H_
