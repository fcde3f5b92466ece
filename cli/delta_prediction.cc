// The delta round of a plan, predicted (see delta_prediction.h).
#include "cli/delta_prediction.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/member_name.h"
#include "exec/delta/delta_codec.h"
#include "exec/delta/delta_runner.h"
#include "layout/dtype.h"
#include "plan/cost.h"

namespace refit {
namespace {

// The codec's word: the gcd of the message's engine element sizes.
int WordBytes(const Plan& plan, const Message& m) {
  int64_t g = 0;
  for (int32_t i = 0; i < m.num_segments; ++i) {
    const int32_t si = m.first_segment + i;
    if (si < 0 || static_cast<size_t>(si) >= plan.segments.size()) continue;
    const int32_t rec = plan.segments[si].dst_record;
    if (rec < 0 || static_cast<size_t>(rec) >= plan.dst.records.size()) continue;
    g = std::gcd(g, DTypeSize(plan.dst.tensors[plan.dst.records[rec].tensor].dtype));
  }
  return g == 2 || g == 4 || g == 8 ? static_cast<int>(g) : 1;
}

// The planner's link model (plan/cost.h) over the plan's own placement, at
// `link`'s speeds.
CostModel PlanCost(const Plan& plan, const LinkModel& link) {
  PlannerOptions o = plan.options;
  o.prefer_same_host = true;
  o.links = {link.same_gpu_gbps, link.nvlink_gbps, link.net_gbps};
  return CostModel(plan.src, plan.dst, o);
}

}  // namespace

std::vector<int64_t> SnapshotBytesPerRank(const Plan& plan) {
  std::vector<int64_t> out(std::max(0, plan.src.world_size), 0);
  std::set<std::pair<int32_t, std::string>> seen;  // one copy per source region
  const CostModel cost = PlanCost(plan, LinkModel());
  for (const Message& m : plan.messages) {
    if (m.relay || m.src_rank < 0 || static_cast<size_t>(m.src_rank) >= out.size() ||
        cost.ClassOf(m.src_rank, m.dst_rank) == LinkClass::kSameGpu) {
      continue;
    }
    if (seen.insert({m.src_rank, DeltaRunner::SourceKey(plan, m)}).second) {
      out[m.src_rank] += m.bytes;
    }
  }
  return out;
}

absl::Status CheckSnapshotBound(const std::vector<int64_t>& snapshot_bytes, int64_t max_bytes,
                                const std::string& flag) {
  if (max_bytes <= 0) return absl::OkStatus();
  for (size_t r = 0; r < snapshot_bytes.size(); ++r) {
    if (snapshot_bytes[r] > max_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "trainer rank ", r, " needs a delta snapshot of ", snapshot_bytes[r],
          " bytes, above ", flag, " (", max_bytes, " bytes)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DeltaPrediction> PredictDelta(const Plan& plan, const LinkModel& link,
                                             const DeltaModel& model) {
  if (!(model.fraction >= 0 && model.fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--delta: the changed fraction must be in [0, 1], got ", model.fraction));
  }
  const int32_t ws = plan.src.world_size, wd = plan.dst.world_size;
  DeltaPrediction p;
  p.snapshot_bytes = SnapshotBytesPerRank(plan);
  for (size_t r = 0; r < p.snapshot_bytes.size(); ++r) {
    if (p.snapshot_bytes[r] > p.snapshot_max) {
      p.snapshot_max = p.snapshot_bytes[r];
      p.snapshot_max_rank = static_cast<int32_t>(r);
    }
  }
  const double hbm = model.hbm_gbps * 1e9;
  // fwd: a relay's egress (engine rank), apart from its ingress (full
  // duplex).
  std::vector<double> enc(ws, 0), wire_s(ws, 0), wire_d(wd, 0), apply(wd, 0), fwd(wd, 0);
  std::vector<std::vector<bool>> src_waves(ws), dst_waves(wd);
  const CostModel cost = PlanCost(plan, link);
  for (size_t i = 0; i < plan.messages.size(); ++i) {
    const Message& m = plan.messages[i];
    if (m.src_rank < 0 || m.src_rank >= (m.relay ? wd : ws) || m.dst_rank < 0 ||
        m.dst_rank >= wd) {
      return absl::InvalidArgumentError(absl::StrCat("message ", i, " names ranks outside the worlds"));
    }
    p.dense_bytes += m.bytes;
    const LinkClass k =
        m.relay ? cost.EngineClassOf(m.src_rank, m.dst_rank) : cost.ClassOf(m.src_rank, m.dst_rank);
    const bool gpu = k == LinkClass::kSameGpu;
    const double bw = 1.0 / cost.SecondsPerByte(k);
    if (gpu) {  // the pull path: dense, one device copy
      p.wire_bytes += m.bytes;
      (m.relay ? fwd : wire_s)[m.src_rank] += m.bytes / bw;
      wire_d[m.dst_rank] += m.bytes / bw;
      continue;
    }
    const int w = WordBytes(plan, m);
    const int64_t n = m.bytes / w;
    const int64_t c = std::min<int64_t>(n, std::llround(model.fraction * n));
    const DeltaEncoding e = ChooseEncoding(w, n, c);
    const int64_t wire = static_cast<int64_t>(sizeof(DeltaHeader)) + DeltaPayloadBytes(e, w, n, c);
    p.wire_bytes += wire;
    if (m.relay) {
      // A relay repeats the encoding it received (exec/delta/delta_runner.h).
      fwd[m.src_rank] += wire / bw;
    } else {
      // Trainer: read current and snapshot, write the encoding; digest.
      enc[m.src_rank] += (2.0 * m.bytes + wire + (model.verify ? m.bytes : 0)) / hbm;
      wire_s[m.src_rank] += wire / bw;
    }
    wire_d[m.dst_rank] += wire / bw;
    // Engine: staged messages are gathered and unpacked around the apply;
    // the apply reads the encoding and writes the changed words; digest.
    const double staged = m.dst_contiguous ? 0 : 4.0 * m.bytes;
    apply[m.dst_rank] += (staged + wire + c * w + (model.verify ? m.bytes : 0)) / hbm;
    if (m.wave >= 0) {
      auto mark = [&](std::vector<bool>& v) {
        if (v.size() <= static_cast<size_t>(m.wave)) v.resize(m.wave + 1, false);
        v[m.wave] = true;
      };
      mark(m.relay ? dst_waves[m.src_rank] : src_waves[m.src_rank]);
      mark(dst_waves[m.dst_rank]);
    }
  }
  auto waves = [](const std::vector<bool>& v) {
    return static_cast<double>(std::count(v.begin(), v.end(), true));
  };
  // A trainer encodes, then sends; an engine receives once its trainers
  // encoded (the slowest encoder bounds it), then applies: no overlap
  // assumed between the steps.
  double max_enc = 0;
  for (double e : enc) max_enc = std::max(max_enc, e);
  for (int32_t r = 0; r < ws; ++r) {
    const double lat = 2 * waves(src_waves[r]) * model.wave_latency_s;
    const double t = enc[r] + wire_s[r] + lat;
    if (t > p.predicted_seconds) {
      p.predicted_seconds = t;
      p.encode_seconds = enc[r];
      p.wire_seconds = wire_s[r] + lat;
      p.apply_seconds = 0;
      p.slowest_rank = MemberName(true, "", r);
    }
  }
  for (int32_t r = 0; r < wd; ++r) {
    const double lat = 2 * waves(dst_waves[r]) * model.wave_latency_s;
    const double t = max_enc + std::max(wire_d[r], fwd[r]) + lat + apply[r];
    if (t > p.predicted_seconds) {
      p.predicted_seconds = t;
      p.encode_seconds = max_enc;
      p.wire_seconds = std::max(wire_d[r], fwd[r]) + lat;
      p.apply_seconds = apply[r];
      p.slowest_rank = MemberName(false, "", r);
    }
  }
  return p;
}

std::string FormatDeltaText(const DeltaPrediction& p, const DeltaModel& model,
                            double dense_seconds) {
  std::string o;
  absl::StrAppendFormat(
      &o,
      "delta round (%.4g of elements changed, verified): wire bytes %d (%.4f of dense), "
      "predicted %.3f s (%.3f of the dense %.3f s; encode %.3f s, wire %.3f s, apply and "
      "digest %.3f s; slowest: %s)\n",
      model.fraction, p.wire_bytes,
      p.dense_bytes > 0 ? static_cast<double>(p.wire_bytes) / p.dense_bytes : 0.0,
      p.predicted_seconds, dense_seconds > 0 ? p.predicted_seconds / dense_seconds : 0.0,
      dense_seconds, p.encode_seconds, p.wire_seconds, p.apply_seconds,
      p.slowest_rank.empty() ? "none" : p.slowest_rank.c_str());
  int64_t total = 0;
  for (int64_t b : p.snapshot_bytes) total += b;
  absl::StrAppendFormat(&o, "delta snapshot per trainer rank: max %d bytes (trainer rank %d), "
                            "mean %d bytes, total %d bytes\n",
                        p.snapshot_max, p.snapshot_max_rank,
                        p.snapshot_bytes.empty() ? 0 : total / static_cast<int64_t>(p.snapshot_bytes.size()),
                        total);
  return o;
}

}  // namespace refit
