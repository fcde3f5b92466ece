// Whether delta rounds pay for members on host memory (no GPU: the Gloo
// data plane). A host member's delta codec (one thread per member) reads
// the current and the snapshot bytes of every message it sends, counts and
// encodes them (and the engine applies and digests them) at about
// codec_gbps of message bytes, whatever fraction changed; a dense round
// moves the same bytes over the links. So a delta round takes at least the
// codec's time for the busiest rank's bytes, and when that is above the
// dense round's predicted time at the host links, delta cannot win: refitd
// then runs the rounds dense and says why. On slow links (below the codec's
// rate) delta pays and runs.
#ifndef REFIT_PLAN_HOST_DELTA_H_
#define REFIT_PLAN_HOST_DELTA_H_

#include <string>

#include "absl/status/statusor.h"

#include "plan/cost.h"
#include "plan/plan.h"

namespace refit {

struct HostDeltaModel {
  // GB/s (1e9 bytes/s) of message bytes one member's host codec handles:
  // Qwen3-0.6B (1.19 GB) took 6.4-10.4 s a 2% delta round on a loaded
  // 2-core x86-64 host, 2026-12-06 (docs/delta.md), about 0.15 GB/s.
  double codec_gbps = 0.2;
  // The links host members' bytes move over (refitd --host_link_gbps).
  LinkSpeeds links = GlooLinkSpeeds();
};

struct HostDeltaChoice {
  bool delta = true;           // false: run the rounds dense
  double codec_seconds = 0;    // the busiest rank's bytes through the codec
  double dense_seconds = 0;    // PredictedSeconds(plan, links)
  std::string reason;          // one line: the figures and the choice
};

// Returns the model for --host_link_gbps (0: GlooLinkSpeeds; else every
// link class at it) and --host_codec_gbps. Fails with INVALID_ARGUMENT
// naming the flag when a rate is negative, zero (the codec), not a number
// or above 1e6.
absl::StatusOr<HostDeltaModel> HostDeltaFromFlags(double host_link_gbps,
                                                  double host_codec_gbps);

// Returns the choice for `plan` (its messages and placement) under
// `model`: delta while the codec's time is below the dense round's. Never
// fails (a plan without messages keeps delta, at 0 s).
HostDeltaChoice ChooseHostDelta(const Plan& plan, const HostDeltaModel& model);

}  // namespace refit

#endif  // REFIT_PLAN_HOST_DELTA_H_
