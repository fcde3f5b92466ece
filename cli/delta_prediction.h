// The delta round of a plan, predicted for `refit plan --delta=F`: each
// message's wire bytes by the codec's size formula (exec/delta/
// delta_codec.h: the smallest of indices, bitmask and dense for F of its
// words changed, plus its 32-byte header), and the round's time as the
// slowest rank's sum of its steps: the trainer reads current and snapshot
// bytes and writes the encoding at HBM speed, the wire moves the encoded
// bytes at the plan's link speeds (plus two small exchanges per wave: the
// headers first), the engine gathers staged messages, applies and
// digests. Pairs on one GPU (the colocated pull path) stay dense and keep
// no snapshot. A relay (an engine rank forwarding) repeats the encoding it
// received: its forwards' wire bytes count on its egress, apart from its
// ingress (full duplex), with no encode.
#ifndef REFIT_CLI_DELTA_PREDICTION_H_
#define REFIT_CLI_DELTA_PREDICTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/plan_summary.h"
#include "plan/plan.h"

namespace refit {

struct DeltaModel {
  double fraction = 0.02;       // of each message's words changed
  double hbm_gbps = 2600;       // GB/s a kernel streams (0.8 of H100's 3.35 TB/s)
  double wave_latency_s = 20e-6;  // per small exchange (a wave's headers)
  bool verify = true;           // both sides digest every byte (on with delta)
};

struct DeltaPrediction {
  std::vector<int64_t> snapshot_bytes;  // per trainer rank
  int64_t snapshot_max = 0;
  int32_t snapshot_max_rank = 0;
  int64_t dense_bytes = 0;  // the plan's bytes
  int64_t wire_bytes = 0;   // headers and payloads
  double encode_seconds = 0, wire_seconds = 0, apply_seconds = 0;  // of the slowest rank
  double predicted_seconds = 0;
  std::string slowest_rank;
};

// Fails with INVALID_ARGUMENT naming --delta when the fraction is outside
// [0, 1], or a message naming ranks outside the worlds.
absl::StatusOr<DeltaPrediction> PredictDelta(const Plan& plan, const LinkModel& link,
                                             const DeltaModel& model);

// Snapshot bytes per trainer rank (no model needed).
std::vector<int64_t> SnapshotBytesPerRank(const Plan& plan);

// OK when every trainer rank's snapshot fits `max_bytes` (0: no bound);
// else RESOURCE_EXHAUSTED naming the rank, its bytes and the bound.
absl::Status CheckSnapshotBound(const std::vector<int64_t>& snapshot_bytes, int64_t max_bytes,
                                const std::string& flag);

// "delta round (...)" and "delta snapshot ..." lines for refit plan.
std::string FormatDeltaText(const DeltaPrediction& p, const DeltaModel& model,
                            double dense_seconds);

}  // namespace refit

#endif  // REFIT_CLI_DELTA_PREDICTION_H_
