// RelayRoots: which trainer rank first sent the bytes a relay message
// forwards (plan.h, Relays). A relay's segment reads a region of a record
// of its relaying engine rank; the plan's earlier messages deliver that
// region there, as one segment of the same box or as parts of several
// (an engine of another layout cuts regions differently: a sub-region of
// one received segment, or a union of several). Following those parts
// back hop by hop ends at trainer ranks' messages. A trainer rank's plan
// slice carries the relays of its bytes, so that a verified round digests
// what every relayed replica must hold (exec/delta/delta_runner.h,
// Relays).
#ifndef REFIT_PLAN_RELAY_ROOTS_H_
#define REFIT_PLAN_RELAY_ROOTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "layout/box.h"
#include "plan/plan.h"

namespace refit {

// Returns a key naming where a segment lands (or, for a relay, where it is
// read): engine rank, engine record and box. Equal keys, equal region.
std::string SegmentPlaceKey(int32_t engine_rank, int32_t record, const Box& box);

// Where a plan's messages land, segment by segment, to find what delivered
// a region a relay reads.
class RelayArrivals {
 public:
  // One delivered part of a region: segment `segment` (its index within
  // message `message`) wrote `box` of it (the region's intersection with
  // the segment's box).
  struct Part {
    int32_t message = 0;
    int32_t segment = 0;
    Box box;
  };
  // Indexes every segment of `plan` (whole or a slice) by where it lands;
  // `plan` must outlive it.
  explicit RelayArrivals(const Plan& plan);
  // Returns the parts of `box` of engine rank `rank`'s record `record`
  // that the plan's messages deliver, in message then segment order: one
  // part, the whole box, when a segment lands exactly there. *covered
  // (when set) is whether the parts add up to the whole box (the plan
  // writes every engine element once, so parts never overlap). Never
  // fails.
  std::vector<Part> PartsOf(int32_t rank, int32_t record, const Box& box,
                            bool* covered = nullptr) const;

 private:
  const Plan& plan_;
  std::map<std::string, std::pair<int32_t, int32_t>> exact_;  // key -> (message, segment)
  // (engine rank, record, message, segment), sorted.
  std::vector<std::tuple<int32_t, int32_t, int32_t, int32_t>> by_record_;
};

// Returns, per message of `plan` (same indices), the trainer ranks whose
// messages first sent the bytes of its segments, sorted and distinct:
// empty for a message that is not a relay and for a relay segment whose
// region no message delivers.
std::vector<std::vector<int32_t>> RelayRoots(const Plan& plan);

}  // namespace refit

#endif  // REFIT_PLAN_RELAY_ROOTS_H_
