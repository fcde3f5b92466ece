// The refit time model the planner optimizes and reports: a byte between a
// source and a destination rank on one host moves at the intra-host speed,
// between hosts at the inter-host speed; a rank's time is its bytes (sent
// for a source rank, received for a destination rank) at those speeds; the
// refit takes the slowest rank's time.
#ifndef REFIT_PLAN_COST_H_
#define REFIT_PLAN_COST_H_

#include <cstdint>

#include "layout/layout.h"
#include "plan/plan.h"

namespace refit {

// Link classes of one (src rank, dst rank) pair under a placement.
class CostModel {
 public:
  // `src` and `dst` give host_of_rank (both, with one entry per rank, for
  // the placement to count; otherwise every pair is inter-host). The
  // speeds are taken from options.links (GB/s, 1e9 bytes per second);
  // options must be valid (positive speeds).
  CostModel(const SideLayout& src, const SideLayout& dst,
            const PlannerOptions& options);

  // Returns whether src rank `s` and dst rank `d` share a host (false when
  // the placement is unknown or a rank is out of range).
  bool SameHost(int32_t s, int32_t d) const {
    return known_ && s >= 0 && d >= 0 && s < static_cast<int32_t>(src_host_->size()) &&
           d < static_cast<int32_t>(dst_host_->size()) &&
           (*src_host_)[s] == (*dst_host_)[d];
  }

  // Returns the seconds a rank takes for `intra` intra-host and `inter`
  // inter-host bytes.
  double Seconds(int64_t intra, int64_t inter) const {
    return static_cast<double>(intra) * intra_spb_ +
           static_cast<double>(inter) * inter_spb_;
  }

  // Returns whether a byte moves at least as fast within a host as across.
  bool intra_not_slower() const { return intra_spb_ <= inter_spb_; }

  // Returns whether the placement is known.
  bool placement_known() const { return known_; }

 private:
  const std::vector<int32_t>* src_host_;
  const std::vector<int32_t>* dst_host_;
  bool known_;
  double intra_spb_;  // seconds per byte
  double inter_spb_;
};

}  // namespace refit

#endif  // REFIT_PLAN_COST_H_
