// ChooseHostDelta (see host_delta.h).
#include "plan/host_delta.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace refit {

absl::StatusOr<HostDeltaModel> HostDeltaFromFlags(double host_link_gbps,
                                                  double host_codec_gbps) {
  if (!(host_link_gbps >= 0 && host_link_gbps <= 1e6)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--host_link_gbps: GB/s from 0 (Gloo's speeds) to 1e6, got ", host_link_gbps));
  }
  if (!(host_codec_gbps > 0 && host_codec_gbps <= 1e6)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--host_codec_gbps: GB/s above 0, at most 1e6, got ", host_codec_gbps));
  }
  HostDeltaModel m;
  m.codec_gbps = host_codec_gbps;
  if (host_link_gbps > 0) {
    m.links.same_gpu_gbps = m.links.intra_host_gbps = m.links.inter_host_gbps = host_link_gbps;
  }
  return m;
}

HostDeltaChoice ChooseHostDelta(const Plan& plan, const HostDeltaModel& model) {
  HostDeltaChoice c;
  std::vector<int64_t> sent(std::max(0, plan.src.world_size), 0),
      received(std::max(0, plan.dst.world_size), 0);
  for (const Message& m : plan.messages) {
    // A relay forwards what it received: its codec work is counted there.
    if (!m.relay && m.src_rank >= 0 && m.src_rank < static_cast<int32_t>(sent.size())) {
      sent[m.src_rank] += m.bytes;
    }
    if (m.dst_rank >= 0 && m.dst_rank < static_cast<int32_t>(received.size())) {
      received[m.dst_rank] += m.bytes;
    }
  }
  int64_t busiest = 0;
  for (const auto* side : {&sent, &received}) {
    for (int64_t b : *side) busiest = std::max(busiest, b);
  }
  c.codec_seconds = static_cast<double>(busiest) / (model.codec_gbps * 1e9);
  c.dense_seconds = PredictedSeconds(plan, model.links);
  c.delta = c.codec_seconds < c.dense_seconds || busiest == 0;
  c.reason = absl::StrFormat(
      "%s: the host delta codec (%.2f GB/s a member) needs %.3f s for the busiest rank's "
      "%d bytes however few change, a dense round over the host links (%.2f GB/s within a "
      "host, %.2f between hosts) %.3f s",
      c.delta ? "delta rounds run" : "delta rounds run dense", model.codec_gbps,
      c.codec_seconds, busiest, model.links.intra_host_gbps, model.links.inter_host_gbps,
      c.dense_seconds);
  return c;
}

}  // namespace refit
