// Plan summary, text/JSON formatting and the SVG heat map for `refit plan`.
#include "cli/plan_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/member_name.h"
#include "plan/cost.h"
#include "nlohmann/json.hpp"

namespace refit {
namespace {

std::vector<RankBytes> Busiest(const std::vector<int64_t>& v, size_t n) {
  std::vector<RankBytes> all;
  for (size_t i = 0; i < v.size(); ++i) {
    all.push_back({static_cast<int32_t>(i), v[i]});
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const RankBytes& a, const RankBytes& b) {
                     return a.bytes > b.bytes;
                   });
  if (all.size() > n) all.resize(n);
  return all;
}

std::vector<HistogramBin> EmptyHistogram() {
  // Power-of-16 bins from 4 KiB to 256 MiB.
  std::vector<HistogramBin> bins;
  int64_t lo = 0;
  for (int64_t hi = 4 << 10; hi <= (256LL << 20); hi *= 16) {
    bins.push_back({absl::StrCat("[", HumanBinaryBytes(lo), ", ", HumanBinaryBytes(hi),
                                 ")"),
                    lo, hi, 0, 0});
    lo = hi;
  }
  bins.push_back({absl::StrCat(">= ", HumanBinaryBytes(lo)), lo, 0, 0, 0});
  return bins;
}

}  // namespace

std::string HumanBinaryBytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return absl::StrCat(b, " B");
  if (v == std::floor(v)) return absl::StrFormat("%.0f %s", v, units[u]);
  return absl::StrFormat("%.2f %s", v, units[u]);
}

int32_t TrainerHost(const LinkModel& link, int32_t src_world, int32_t r) {
  (void)src_world;
  return r / link.gpus_per_host;
}

int32_t EngineHost(const LinkModel& link, int32_t src_world, int32_t r) {
  if (link.colocated) return r / link.gpus_per_host;
  const int32_t trainer_hosts =
      (src_world + link.gpus_per_host - 1) / link.gpus_per_host;
  return trainer_hosts + r / link.gpus_per_host;
}

absl::StatusOr<PlanSummary> SummarizePlan(const Plan& plan, const LinkModel& link,
                                          const std::vector<int32_t>& src_stage) {
  if (link.gpus_per_host < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpus per host must be >= 1, got ", link.gpus_per_host));
  }
  if (!(link.same_gpu_gbps > 0) || !(link.nvlink_gbps > 0) || !(link.net_gbps > 0)) {
    return absl::InvalidArgumentError("link bandwidths must be > 0");
  }
  PlanSummary s;
  s.src_world = plan.src.world_size;
  s.dst_world = plan.dst.world_size;
  std::vector<int64_t> sent(s.src_world, 0), recv(s.dst_world, 0), forwarded(s.dst_world, 0);
  s.histogram = EmptyHistogram();

  // Hosts: the plan's placement, else the shorthand.
  std::vector<int32_t> src_host(s.src_world), dst_host(s.dst_world);
  const bool placed =
      static_cast<int32_t>(plan.src.host_of_rank.size()) == s.src_world &&
      static_cast<int32_t>(plan.dst.host_of_rank.size()) == s.dst_world;
  for (int32_t r = 0; r < s.src_world; ++r) {
    src_host[r] = placed ? plan.src.host_of_rank[r] : TrainerHost(link, s.src_world, r);
  }
  for (int32_t r = 0; r < s.dst_world; ++r) {
    dst_host[r] = placed ? plan.dst.host_of_rank[r] : EngineHost(link, s.src_world, r);
  }
  // GPUs: the plan's, else the shorthand's (colocated: rank r with rank r).
  const bool gpus = placed &&
                    static_cast<int32_t>(plan.src.gpu_of_rank.size()) == s.src_world &&
                    static_cast<int32_t>(plan.dst.gpu_of_rank.size()) == s.dst_world;
  // Times come from the planner's own model (plan/cost.h) over this
  // placement, at the link model's speeds.
  SideLayout src_side, dst_side;
  src_side.world_size = s.src_world;
  dst_side.world_size = s.dst_world;
  src_side.host_of_rank = src_host;
  dst_side.host_of_rank = dst_host;
  if (gpus) {
    src_side.gpu_of_rank = plan.src.gpu_of_rank;
    dst_side.gpu_of_rank = plan.dst.gpu_of_rank;
  } else if (!placed && link.colocated) {
    for (int32_t r = 0; r < s.src_world; ++r) src_side.gpu_of_rank.push_back(r);
    for (int32_t r = 0; r < s.dst_world; ++r) dst_side.gpu_of_rank.push_back(r);
  }
  PlannerOptions model;
  model.prefer_same_host = true;
  model.links = {link.same_gpu_gbps, link.nvlink_gbps, link.net_gbps};
  const CostModel cost(src_side, dst_side, model);
  RankLoads wire(s.src_world, s.dst_world), in_trainer_dtypes(s.src_world, s.dst_world);
  if (!src_stage.empty() && static_cast<int32_t>(src_stage.size()) != s.src_world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "src_stage: ", src_stage.size(), " stages for ", s.src_world, " trainer ranks"));
  }
  // The heat map's rows and columns (see PlanSummary::heat_unit).
  std::vector<int32_t> src_row(s.src_world), dst_col(s.dst_world);
  bool shares_gpu = !placed && link.colocated;
  if (gpus) {
    std::set<std::pair<int32_t, int32_t>> trainer_gpus;
    for (int32_t r = 0; r < s.src_world; ++r) {
      if (plan.src.gpu_of_rank[r] >= 0) trainer_gpus.insert({src_host[r], plan.src.gpu_of_rank[r]});
    }
    for (int32_t r = 0; r < s.dst_world && !shares_gpu; ++r) {
      shares_gpu = trainer_gpus.count({dst_host[r], plan.dst.gpu_of_rank[r]}) > 0;
    }
  }
  constexpr int32_t kMaxGpuView = 256;  // ranks a side; more make an unreadable SVG
  if (shares_gpu && s.src_world <= kMaxGpuView && s.dst_world <= kMaxGpuView) {
    s.heat_unit = "gpu";
    s.heat_row_hosts = src_host;
    s.heat_col_hosts = dst_host;
    for (int32_t r = 0; r < s.src_world; ++r) {
      src_row[r] = r;
      s.heat_row_gpus.push_back(gpus ? plan.src.gpu_of_rank[r] : r);
      s.heat_row_labels.push_back(absl::StrCat(r));
    }
    for (int32_t r = 0; r < s.dst_world; ++r) {
      dst_col[r] = r;
      s.heat_col_gpus.push_back(gpus ? plan.dst.gpu_of_rank[r] : r);
      s.heat_col_labels.push_back(absl::StrCat(r));
    }
  } else {
    s.heat_row_hosts = src_host;
    s.heat_col_hosts = dst_host;
    for (auto* v : {&s.heat_row_hosts, &s.heat_col_hosts}) {
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    auto index_in = [](const std::vector<int32_t>& v, int32_t h) {
      return static_cast<int32_t>(std::lower_bound(v.begin(), v.end(), h) - v.begin());
    };
    for (int32_t r = 0; r < s.src_world; ++r) src_row[r] = index_in(s.heat_row_hosts, src_host[r]);
    for (int32_t r = 0; r < s.dst_world; ++r) dst_col[r] = index_in(s.heat_col_hosts, dst_host[r]);
    // Each side numbered from 0 on its own.
    for (size_t i = 0; i < s.heat_row_hosts.size(); ++i) s.heat_row_labels.push_back(absl::StrCat(i));
    for (size_t j = 0; j < s.heat_col_hosts.size(); ++j) s.heat_col_labels.push_back(absl::StrCat(j));
  }
  if (!src_stage.empty()) {
    std::vector<std::set<int32_t>> stages(s.heat_row_labels.size());
    for (int32_t r = 0; r < s.src_world; ++r) stages[src_row[r]].insert(src_stage[r]);
    for (size_t i = 0; i < stages.size(); ++i) {
      if (stages[i].empty()) continue;
      const int32_t lo = *stages[i].begin(), hi = *stages[i].rbegin();
      absl::StrAppend(&s.heat_row_labels[i], lo == hi ? absl::StrCat(" pp ", lo)
                                                      : absl::StrCat(" pp ", lo, "-", hi));
    }
  }
  s.heat.assign(s.heat_row_labels.size(), std::vector<int64_t>(s.heat_col_labels.size(), 0));
  s.lower_bound_seconds = plan.stats.lower_bound_seconds;
  s.sender_lower_bound_seconds = plan.stats.sender_lower_bound_seconds;
  s.relay_depth = plan.stats.relay_depth;
  s.relay = plan.options.relay;

  // Bytes per wire byte had the trainer's dtype travelled, per src tensor.
  std::vector<double> unconverted(plan.src.tensors.size(), 1.0);
  // The format of each converted src tensor and of its scales ("" if none).
  std::vector<std::string> format(plan.src.tensors.size());
  bool per_segment = !plan.conversions.empty();
  {
    std::map<std::string, std::string> converted;  // weight name -> format
    for (const Conversion& c : plan.conversions) {
      if (c.from.tensor < 0 || c.from.tensor >= static_cast<int32_t>(unconverted.size())) continue;
      const TensorSpec& t = plan.src.tensors[c.from.tensor];
      // NVFP4 packs two elements a byte.
      unconverted[c.from.tensor] =
          static_cast<double>(DTypeSize(c.from_dtype)) / DTypeSize(t.dtype) *
          (QuantizesTo(c, QuantFormat::kNvfp4) ? 2 : 1);
      format[c.from.tensor] = ConversionFormatName(c);
      converted[t.name] = ConversionFormatName(c);
    }
    for (size_t t = 0; t < plan.src.tensors.size(); ++t) {
      const std::string& n = plan.src.tensors[t].name;
      for (absl::string_view suffix : {"_scale_inv", "_scale", "_scale_2"}) {
        if (!absl::EndsWith(n, suffix)) continue;
        auto it = converted.find(n.substr(0, n.size() - suffix.size()));
        if (it == converted.end() || !format[t].empty()) continue;
        unconverted[t] = 0;  // scales exist only because of the conversion
        format[t] = it->second;
      }
    }
    // A trainer already in low precision (weights=mxfp8|nvfp4, --dtype fp8):
    // its codes and scales travel as they are, under their own format.
    for (size_t t = 0; t < plan.src.tensors.size(); ++t) {
      const TensorSpec& x = plan.src.tensors[t];
      if (!format[t].empty() || !x.format.has_value()) continue;
      format[t] = std::string(QuantFormatName(*x.format));
      per_segment = true;
    }
  }
  std::map<std::string, int64_t> by_format;
  int32_t num_hosts = 0;
  for (int32_t h : src_host) num_hosts = std::max(num_hosts, h + 1);
  for (int32_t h : dst_host) num_hosts = std::max(num_hosts, h + 1);
  s.host_sent.assign(num_hosts, 0);
  s.host_received.assign(num_hosts, 0);
  s.host_messages.assign(num_hosts, 0);
  s.converted_records = static_cast<int64_t>(plan.conversions.size());
  {
    std::map<std::string, PlanSummary::Passes> passes;
    for (const Conversion& c : plan.conversions) {
      PlanSummary::Passes& p = passes[ConversionFormatName(c)];
      ++(c.one_pass ? p.one_pass : p.two_passes);
    }
    for (auto& [name, p] : passes) {
      p.format = name;
      s.passes_by_format.push_back(std::move(p));
    }
  }
  for (size_t i = 0; i < plan.messages.size(); ++i) {
    const Message& m = plan.messages[i];
    if (m.src_rank < 0 || m.src_rank >= (m.relay ? s.dst_world : s.src_world) ||
        m.dst_rank < 0 || m.dst_rank >= s.dst_world) {
      return absl::InvalidArgumentError(absl::StrCat(
          "message ", i, " names rank pair (", m.relay ? "engine " : "", m.src_rank, " -> ",
          m.dst_rank, ") outside the worlds (", s.src_world, ", ", s.dst_world, ")"));
    }
    s.total_bytes += m.bytes;
    (m.relay ? forwarded : sent)[m.src_rank] += m.bytes;
    recv[m.dst_rank] += m.bytes;
    const LinkClass k = m.relay ? cost.EngineClassOf(m.src_rank, m.dst_rank)
                                : cost.ClassOf(m.src_rank, m.dst_rank);
    const bool gpu = k == LinkClass::kSameGpu, intra = k != LinkClass::kInterHost;
    (gpu ? s.same_gpu_bytes : intra ? s.intra_host_bytes : s.inter_host_bytes) += m.bytes;
    const int32_t from_host = (m.relay ? dst_host : src_host)[m.src_rank];
    if (!intra && from_host >= 0 && dst_host[m.dst_rank] >= 0) {
      s.host_sent[from_host] += m.bytes;
      s.host_received[dst_host[m.dst_rank]] += m.bytes;
      ++s.host_messages[from_host];
      ++s.host_messages[dst_host[m.dst_rank]];
    }
    wire.Add(cost, m, m.bytes);
    double ub = plan.conversions.empty() ? static_cast<double>(m.bytes) : 0.0;
    for (int32_t k = m.first_segment; per_segment && k < m.first_segment + m.num_segments;
         ++k) {
      if (k < 0 || k >= static_cast<int32_t>(plan.segments.size())) continue;
      const Segment& g = plan.segments[k];
      // A relay's source record is the engine's: its trainer tensor is the
      // one its destination record's tensor maps to.
      const std::vector<Record>& from = m.relay ? plan.dst.records : plan.src.records;
      int32_t t = g.src_record >= 0 && g.src_record < static_cast<int32_t>(from.size())
                      ? from[g.src_record].tensor
                      : -1;
      if (m.relay && t >= 0) {
        t = t < static_cast<int32_t>(plan.dst_to_src_tensor.size()) ? plan.dst_to_src_tensor[t]
                                                                     : -1;
      }
      const double factor =
          t >= 0 && t < static_cast<int32_t>(unconverted.size()) ? unconverted[t] : 1.0;
      if (!plan.conversions.empty()) ub += g.bytes * factor;
      if (t >= 0 && t < static_cast<int32_t>(format.size()) && !format[t].empty()) {
        by_format[format[t]] += g.bytes;
      }
      if (factor != 1.0) {
        s.converted_wire_bytes += g.bytes;
        s.converted_unconverted_bytes += static_cast<int64_t>(g.bytes * factor);
      }
    }
    s.unconverted_bytes += static_cast<int64_t>(ub);
    in_trainer_dtypes.Add(cost, m, std::llround(ub));
    for (HistogramBin& b : s.histogram) {
      if (m.bytes >= b.lo && (b.hi == 0 || m.bytes < b.hi)) {
        ++b.count;
        b.bytes += m.bytes;
        break;
      }
    }
    if (!m.relay) s.heat[src_row[m.src_rank]][dst_col[m.dst_rank]] += m.bytes;
  }
  s.num_segments = static_cast<int64_t>(plan.segments.size());
  s.num_messages = static_cast<int64_t>(plan.messages.size());
  s.num_waves = static_cast<int64_t>(plan.waves.size());
  if (!sent.empty()) {
    s.sent_max = *std::max_element(sent.begin(), sent.end());
    int64_t all = 0;
    for (int64_t b : sent) all += b;
    s.sent_mean = static_cast<double>(all) / sent.size();
  }
  if (!recv.empty()) {
    s.received_max = *std::max_element(recv.begin(), recv.end());
    s.received_mean = static_cast<double>(s.total_bytes) / recv.size();
  }
  s.busiest_senders = Busiest(sent, 5);
  if (!forwarded.empty()) {
    s.forwarded_max = *std::max_element(forwarded.begin(), forwarded.end());
    int64_t all = 0;
    for (int64_t b : forwarded) all += b;
    s.forwarded_mean = static_cast<double>(all) / forwarded.size();
    if (all > 0) s.busiest_forwarders = Busiest(forwarded, 5);
  }
  s.busiest_receivers = Busiest(recv, 5);
  for (int64_t v : plan.stats.staging_src) {
    s.peak_staging_src = std::max(s.peak_staging_src, v);
  }
  for (int64_t v : plan.stats.staging_dst) {
    s.peak_staging_dst = std::max(s.peak_staging_dst, v);
  }
  s.unconverted_seconds = in_trainer_dtypes.SlowestRank(cost).seconds;
  // An engine rank receives and forwards at once (full duplex).
  const RankLoads::Slowest slowest = wire.SlowestRank(cost);
  s.predicted_seconds = slowest.seconds;
  if (slowest.rank >= 0) s.slowest_rank = MemberName(slowest.trainer, "", slowest.rank);
  s.wire_bytes_by_format.assign(by_format.begin(), by_format.end());
  s.gloo_predicted_seconds = PredictedSeconds(plan, GlooLinkSpeeds());
  return s;
}

std::string FormatSummaryText(const PlanSummary& s) {
  std::string o;
  absl::StrAppendFormat(&o, "total bytes moved: %d (%s)\n", s.total_bytes,
                        HumanBinaryBytes(s.total_bytes));
  absl::StrAppendFormat(&o, "trainer ranks: %d, engine ranks: %d\n",
                        s.src_world, s.dst_world);
  absl::StrAppendFormat(&o, "sent per trainer rank: max %s, mean %s\n",
                        HumanBinaryBytes(s.sent_max),
                        HumanBinaryBytes(static_cast<int64_t>(s.sent_mean)));
  o += "  busiest senders:";
  for (const RankBytes& r : s.busiest_senders) {
    absl::StrAppendFormat(&o, " %d (%s)", r.rank, HumanBinaryBytes(r.bytes));
  }
  absl::StrAppendFormat(&o, "\nreceived per engine rank: max %s, mean %s\n",
                        HumanBinaryBytes(s.received_max),
                        HumanBinaryBytes(static_cast<int64_t>(s.received_mean)));
  o += "  busiest receivers:";
  for (const RankBytes& r : s.busiest_receivers) {
    absl::StrAppendFormat(&o, " %d (%s)", r.rank, HumanBinaryBytes(r.bytes));
  }
  if (s.relay) {
    absl::StrAppendFormat(&o, "\nforwarded per engine rank (relays, depth %d): max %s, mean %s",
                          s.relay_depth, HumanBinaryBytes(s.forwarded_max),
                          HumanBinaryBytes(static_cast<int64_t>(s.forwarded_mean)));
    if (!s.busiest_forwarders.empty()) o += "\n  busiest forwarders:";
    for (const RankBytes& r : s.busiest_forwarders) {
      absl::StrAppendFormat(&o, " %d (%s)", r.rank, HumanBinaryBytes(r.bytes));
    }
  }
  absl::StrAppendFormat(&o,
                        "\ntransfers (segments): %d, messages: %d, waves: %d\n",
                        s.num_segments, s.num_messages, s.num_waves);
  o += "message sizes:\n";
  for (const HistogramBin& b : s.histogram) {
    absl::StrAppendFormat(&o, "  %-22s %8d messages  %s\n", b.label, b.count,
                          HumanBinaryBytes(b.bytes));
  }
  absl::StrAppendFormat(&o, "peak staging per rank: trainer %s, engine %s\n",
                        HumanBinaryBytes(s.peak_staging_src),
                        HumanBinaryBytes(s.peak_staging_dst));
  absl::StrAppendFormat(&o,
                        "same-GPU bytes: %s, intra-host bytes (between GPUs): %s, "
                        "inter-host bytes: %s\n",
                        HumanBinaryBytes(s.same_gpu_bytes), HumanBinaryBytes(s.intra_host_bytes),
                        HumanBinaryBytes(s.inter_host_bytes));
  absl::StrAppendFormat(&o, "predicted refit time: %.3f s (slowest: %s)\n",
                        s.predicted_seconds,
                        s.slowest_rank.empty() ? "none" : s.slowest_rank);
  if (s.gloo_predicted_seconds > 0) {
    absl::StrAppendFormat(&o,
                          "predicted over Gloo (members on host memory, TCP: 1 GB/s within a "
                          "host, 1.25 GB/s between hosts): %.3f s\n",
                          s.gloo_predicted_seconds);
  }
  if (s.lower_bound_seconds > 0 && s.relay) {
    absl::StrAppendFormat(&o,
                          "lower bound with relays: %.3f s, predicted / lower bound: %.3f; "
                          "trainer ranks as the only senders: %.3f s\n",
                          s.lower_bound_seconds, s.predicted_seconds / s.lower_bound_seconds,
                          s.sender_lower_bound_seconds);
  } else if (s.lower_bound_seconds > 0) {
    absl::StrAppendFormat(&o, "lower bound: %.3f s, predicted / lower bound: %.3f\n",
                          s.lower_bound_seconds,
                          s.predicted_seconds / s.lower_bound_seconds);
  }
  if (s.converted_records > 0) {
    absl::StrAppendFormat(
        &o,
        "converted by the senders (%d records): %s on the wire; in the trainer's "
        "dtypes it would be %s (%.2fx) and %.3f s\n",
        s.converted_records, HumanBinaryBytes(s.total_bytes), HumanBinaryBytes(s.unconverted_bytes),
        s.unconverted_bytes > 0 ? static_cast<double>(s.total_bytes) / s.unconverted_bytes : 0,
        s.unconverted_seconds);
    absl::StrAppendFormat(
        &o, "  the converted tensors with their scales: %s on the wire, %s in the "
            "trainer's dtypes (%.3fx)\n",
        HumanBinaryBytes(s.converted_wire_bytes), HumanBinaryBytes(s.converted_unconverted_bytes),
        s.converted_unconverted_bytes > 0
            ? static_cast<double>(s.converted_wire_bytes) / s.converted_unconverted_bytes
            : 0);
    std::string formats;
    for (const auto& [name, bytes] : s.wire_bytes_by_format) {
      absl::StrAppend(&formats, formats.empty() ? "" : ", ", name, " ",
                      HumanBinaryBytes(bytes));
    }
    if (!formats.empty()) absl::StrAppend(&o, "  on the wire by format: ", formats, "\n");
    std::string passes;
    for (const PlanSummary::Passes& p : s.passes_by_format) {
      absl::StrAppend(&passes, passes.empty() ? "" : ", ", p.format, " ", p.one_pass, " / ",
                      p.two_passes);
    }
    if (!passes.empty()) {
      absl::StrAppend(&o, "  on the colocated pull path, conversions in one pass / two: ", passes,
                      "\n");
    }
  } else if (!s.wire_bytes_by_format.empty()) {
    std::string formats;
    for (const auto& [name, bytes] : s.wire_bytes_by_format) {
      absl::StrAppend(&formats, formats.empty() ? "" : ", ", name, " ",
                      HumanBinaryBytes(bytes));
    }
    absl::StrAppend(&o, "the trainer's low-precision tensors on the wire, by format: ",
                    formats, "\n");
  }
  return o;
}

std::string FormatSummaryJson(const PlanSummary& s) {
  nlohmann::json j;
  j["total_bytes"] = s.total_bytes;
  j["trainer_ranks"] = s.src_world;
  j["engine_ranks"] = s.dst_world;
  auto ranks = [](const std::vector<RankBytes>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const RankBytes& r : v) a.push_back({{"rank", r.rank}, {"bytes", r.bytes}});
    return a;
  };
  j["sent"] = {{"max", s.sent_max}, {"mean", s.sent_mean},
               {"busiest", ranks(s.busiest_senders)}};
  j["received"] = {{"max", s.received_max}, {"mean", s.received_mean},
                   {"busiest", ranks(s.busiest_receivers)}};
  j["segments"] = s.num_segments;
  j["messages"] = s.num_messages;
  j["waves"] = s.num_waves;
  j["rounds"] = s.num_waves;  // the same, under its earlier name (scripts read it)
  nlohmann::json h = nlohmann::json::array();
  for (const HistogramBin& b : s.histogram) {
    h.push_back({{"label", b.label}, {"lo", b.lo}, {"hi", b.hi},
                 {"count", b.count}, {"bytes", b.bytes}});
  }
  j["message_size_histogram"] = h;
  j["peak_staging"] = {{"trainer", s.peak_staging_src},
                       {"engine", s.peak_staging_dst}};
  j["same_gpu_bytes"] = s.same_gpu_bytes;
  j["intra_host_bytes"] = s.intra_host_bytes;
  j["converted_records"] = s.converted_records;
  j["wire_bytes_by_format"] = nlohmann::json::object();
  for (const auto& [name, bytes] : s.wire_bytes_by_format) {
    j["wire_bytes_by_format"][name] = bytes;
  }
  j["conversion_passes"] = nlohmann::json::object();
  for (const PlanSummary::Passes& p : s.passes_by_format) {
    j["conversion_passes"][p.format] = {{"one_pass", p.one_pass}, {"two_passes", p.two_passes}};
  }
  j["unconverted_bytes"] = s.unconverted_bytes;
  j["unconverted_seconds"] = s.unconverted_seconds;
  j["converted_wire_bytes"] = s.converted_wire_bytes;
  j["converted_unconverted_bytes"] = s.converted_unconverted_bytes;
  j["inter_host_bytes"] = s.inter_host_bytes;
  j["predicted_seconds"] = s.predicted_seconds;
  j["gloo_predicted_seconds"] = s.gloo_predicted_seconds;
  j["slowest_rank"] = s.slowest_rank;
  j["lower_bound_seconds"] = s.lower_bound_seconds;
  j["sender_lower_bound_seconds"] = s.sender_lower_bound_seconds;
  j["relay"] = s.relay;
  j["relay_depth"] = s.relay_depth;
  j["forwarded"] = {{"max", s.forwarded_max}, {"mean", s.forwarded_mean},
                    {"busiest", ranks(s.busiest_forwarders)}};
  j["predicted_over_lower_bound"] =
      s.lower_bound_seconds > 0 ? s.predicted_seconds / s.lower_bound_seconds : 0.0;
  j["bytes_by_link"] = {{"same_gpu", s.same_gpu_bytes},
                        {"intra_host", s.intra_host_bytes},
                        {"inter_host", s.inter_host_bytes}};
  if (!s.fingerprint.empty()) j["fingerprint"] = s.fingerprint;
  if (!s.model.empty()) j["model"] = s.model;
  if (!s.trainer_spec.empty()) j["trainer"] = s.trainer_spec;
  if (!s.engine_spec.empty()) j["engine"] = s.engine_spec;
  nlohmann::json heat;
  const bool gpu_view = s.heat_unit == "gpu";
  heat["rows"] = gpu_view ? "trainer rank (one GPU each)" : "trainer host";
  heat["cols"] = gpu_view ? "engine rank (one GPU each)" : "engine host";
  heat["row_labels"] = s.heat_row_labels;
  heat["col_labels"] = s.heat_col_labels;
  heat["row_hosts"] = s.heat_row_hosts;
  heat["col_hosts"] = s.heat_col_hosts;
  heat["bytes"] = s.heat;
  j["heatmap"] = heat;
  j["hosts"] = {{"sent", s.host_sent},
                {"received", s.host_received},
                {"messages", s.host_messages}};
  return j.dump(2) + "\n";
}

std::string RenderHeatmapSvg(const PlanSummary& s, const std::string& title) {
  const int rows = static_cast<int>(s.heat.size());
  const int cols = rows ? static_cast<int>(s.heat[0].size()) : 0;
  int64_t mx = 0;
  for (const auto& r : s.heat) for (int64_t v : r) mx = std::max(mx, v);
  const int cell = std::max(12, std::min(40, 640 / std::max(1, std::max(rows, cols))));
  const int left = 150, top = 70;
  const int legend_w = 230, legend_h = 11 * 18 + 60;
  const int footer = 50;
  // Wide enough for the title (about 8 px per character at 15 px) and the
  // legend, tall enough for the legend, whatever the grid's size.
  const int w = std::max({left + cols * cell + legend_w,
                          20 + 8 * static_cast<int>(title.size()), 600});
  const int h = top + std::max(rows * cell, legend_h) + footer;
  auto color = [&](int64_t v) {
    if (v == 0) return std::string("#f4f4f4");
    double t = mx > 0 ? static_cast<double>(v) / mx : 0;
    // white-ish yellow -> dark red
    int r = static_cast<int>(255 - 75 * t);
    int g = static_cast<int>(230 - 220 * t);
    int b = static_cast<int>(120 - 110 * t);
    return absl::StrFormat("#%02x%02x%02x", r, g, b);
  };
  const bool gpu_view = s.heat_unit == "gpu";
  std::string o = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"20\" font-size=\"15\">%s</text>\n"
      "<text x=\"%d\" y=\"%d\">%s</text>\n"
      "<text x=\"10\" y=\"%d\">%s</text>\n",
      w, h, title, left, top - 28,
      gpu_view ? "engine rank, one GPU each (columns)" : "engine host (columns)",
      top - 10,
      gpu_view ? "trainer rank (rows)" : "trainer host (rows)");
  const int step_c = std::max(1, cols / 16), step_r = std::max(1, rows / 32);
  for (int c = 0; c < cols; c += step_c) {
    absl::StrAppendFormat(&o, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                          left + c * cell + cell / 2, top - 4, s.heat_col_labels[c]);
  }
  std::string outlines;  // drawn last, over the cells
  for (int r = 0; r < rows; ++r) {
    if (r % step_r == 0) {
      absl::StrAppendFormat(&o, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n",
                            left - 6, top + r * cell + cell / 2 + 4,
                            s.heat_row_labels[r]);
    }
    for (int c = 0; c < cols; ++c) {
      const bool intra = s.heat_row_hosts[r] == s.heat_col_hosts[c];
      // A copy within one GPU ("gpu" view) or within one host.
      const bool one_gpu = gpu_view && intra && s.heat_row_gpus[r] >= 0 &&
                           s.heat_row_gpus[r] == s.heat_col_gpus[c];
      const std::string where =
          gpu_view ? absl::StrFormat("trainer rank %s (host %d) -> engine rank %s (host %d)",
                                     s.heat_row_labels[r], s.heat_row_hosts[r],
                                     s.heat_col_labels[c], s.heat_col_hosts[c])
                   : absl::StrFormat("trainer host %s -> engine host %s",
                                     s.heat_row_labels[r], s.heat_col_labels[c]);
      absl::StrAppendFormat(
          &o,
          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" "
          "stroke=\"white\" stroke-width=\"0.5\"><title>%s: %s (%s)</title></rect>\n",
          left + c * cell, top + r * cell, cell, cell, color(s.heat[r][c]), where,
          HumanBinaryBytes(s.heat[r][c]),
          one_gpu ? "same GPU" : intra ? "intra-host" : "inter-host");
      if (gpu_view ? one_gpu : intra) {
        absl::StrAppendFormat(&outlines,
                              "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                              "fill=\"none\" stroke=\"#1f4fd0\" stroke-width=\"2\"/>\n",
                              left + c * cell + 1, top + r * cell + 1, cell - 2,
                              cell - 2);
      }
    }
  }
  o += outlines;
  // Legend.
  const int lx = left + cols * cell + 30, ly = top;
  o += absl::StrFormat("<text x=\"%d\" y=\"%d\">bytes</text>\n", lx, ly - 8);
  for (int i = 0; i <= 10; ++i) {
    int64_t v = mx * (10 - i) / 10;
    absl::StrAppendFormat(&o,
                          "<rect x=\"%d\" y=\"%d\" width=\"20\" height=\"18\" "
                          "fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
                          lx, ly + i * 18, color(v), lx + 26, ly + i * 18 + 13,
                          HumanBinaryBytes(v));
  }
  absl::StrAppendFormat(&o,
                        "<rect x=\"%d\" y=\"%d\" width=\"20\" height=\"18\" fill=\"none\" "
                        "stroke=\"#1f4fd0\" stroke-width=\"2\"/><text x=\"%d\" "
                        "y=\"%d\">%s</text>\n",
                        lx, ly + 11 * 18 + 10, lx + 26, ly + 11 * 18 + 23,
                        gpu_view ? "within one GPU" : "within one host");
  absl::StrAppendFormat(
      &o,
      "<text x=\"10\" y=\"%d\">total %s: same GPU %s, intra-host %s, inter-host "
      "%s; predicted %.3f s</text>\n",
      h - 20, HumanBinaryBytes(s.total_bytes), HumanBinaryBytes(s.same_gpu_bytes),
      HumanBinaryBytes(s.intra_host_bytes), HumanBinaryBytes(s.inter_host_bytes), s.predicted_seconds);
  o += "</svg>\n";
  return o;
}

}  // namespace refit
