// Plan summary, text/JSON formatting and the SVG heat map for `refit plan`.
#include "tools/cli/plan_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/member_name.h"
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
    bins.push_back({absl::StrCat("[", HumanBytes(lo), ", ", HumanBytes(hi),
                                 ")"),
                    lo, hi, 0, 0});
    lo = hi;
  }
  bins.push_back({absl::StrCat(">= ", HumanBytes(lo)), lo, 0, 0, 0});
  return bins;
}

}  // namespace

std::string HumanBytes(int64_t b) {
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

absl::StatusOr<PlanSummary> SummarizePlan(const Plan& plan,
                                          const LinkModel& link) {
  if (link.gpus_per_host < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpus per host must be >= 1, got ", link.gpus_per_host));
  }
  if (!(link.nvlink_gbps > 0) || !(link.net_gbps > 0)) {
    return absl::InvalidArgumentError("link bandwidths must be > 0");
  }
  PlanSummary s;
  s.src_world = plan.src.world_size;
  s.dst_world = plan.dst.world_size;
  std::vector<int64_t> sent(s.src_world, 0), recv(s.dst_world, 0);
  std::vector<double> t_src(s.src_world, 0), t_dst(s.dst_world, 0);
  s.histogram = EmptyHistogram();

  const bool by_stage = !plan.src.stage_of_rank.empty() &&
                        *std::max_element(plan.src.stage_of_rank.begin(),
                                          plan.src.stage_of_rank.end()) > 0;
  int32_t rows = 1;
  if (by_stage) {
    rows = 1 + *std::max_element(plan.src.stage_of_rank.begin(),
                                 plan.src.stage_of_rank.end());
    s.heat_rows_label = "trainer PP stage";
  } else {
    rows = std::max(1, (s.src_world + link.gpus_per_host - 1) /
                           link.gpus_per_host);
    s.heat_rows_label = "trainer host";
  }
  const int32_t cols =
      std::max(1, (s.dst_world + link.gpus_per_host - 1) / link.gpus_per_host);
  s.heat.assign(rows, std::vector<int64_t>(cols, 0));
  const int32_t engine_host0 = EngineHost(link, s.src_world, 0);

  for (size_t i = 0; i < plan.messages.size(); ++i) {
    const Message& m = plan.messages[i];
    if (m.src_rank < 0 || m.src_rank >= s.src_world || m.dst_rank < 0 ||
        m.dst_rank >= s.dst_world) {
      return absl::InvalidArgumentError(absl::StrCat(
          "message ", i, " names rank pair (", m.src_rank, " -> ", m.dst_rank,
          ") outside the worlds (", s.src_world, ", ", s.dst_world, ")"));
    }
    s.total_bytes += m.bytes;
    sent[m.src_rank] += m.bytes;
    recv[m.dst_rank] += m.bytes;
    const bool intra = TrainerHost(link, s.src_world, m.src_rank) ==
                       EngineHost(link, s.src_world, m.dst_rank);
    const double bw = (intra ? link.nvlink_gbps : link.net_gbps) * 1e9;
    (intra ? s.intra_host_bytes : s.inter_host_bytes) += m.bytes;
    t_src[m.src_rank] += m.bytes / bw;
    t_dst[m.dst_rank] += m.bytes / bw;
    for (HistogramBin& b : s.histogram) {
      if (m.bytes >= b.lo && (b.hi == 0 || m.bytes < b.hi)) {
        ++b.count;
        b.bytes += m.bytes;
        break;
      }
    }
    int32_t row = by_stage && m.src_rank < (int32_t)plan.src.stage_of_rank.size()
                      ? plan.src.stage_of_rank[m.src_rank]
                      : TrainerHost(link, s.src_world, m.src_rank);
    int32_t col = EngineHost(link, s.src_world, m.dst_rank) - engine_host0;
    if (row >= 0 && row < rows && col >= 0 && col < cols) {
      s.heat[row][col] += m.bytes;
    }
  }
  s.num_segments = static_cast<int64_t>(plan.segments.size());
  s.num_messages = static_cast<int64_t>(plan.messages.size());
  s.num_rounds = static_cast<int64_t>(plan.rounds.size());
  if (!sent.empty()) {
    s.sent_max = *std::max_element(sent.begin(), sent.end());
    s.sent_mean = static_cast<double>(s.total_bytes) / sent.size();
  }
  if (!recv.empty()) {
    s.received_max = *std::max_element(recv.begin(), recv.end());
    s.received_mean = static_cast<double>(s.total_bytes) / recv.size();
  }
  s.busiest_senders = Busiest(sent, 5);
  s.busiest_receivers = Busiest(recv, 5);
  for (int64_t v : plan.stats.staging_src) {
    s.peak_staging_src = std::max(s.peak_staging_src, v);
  }
  for (int64_t v : plan.stats.staging_dst) {
    s.peak_staging_dst = std::max(s.peak_staging_dst, v);
  }
  for (int32_t r = 0; r < s.src_world; ++r) {
    if (t_src[r] > s.predicted_seconds) {
      s.predicted_seconds = t_src[r];
      s.slowest_rank = MemberName(/*trainer=*/true, "", r);
    }
  }
  for (int32_t r = 0; r < s.dst_world; ++r) {
    if (t_dst[r] > s.predicted_seconds) {
      s.predicted_seconds = t_dst[r];
      s.slowest_rank = MemberName(/*trainer=*/false, "", r);
    }
  }
  return s;
}

std::string FormatSummaryText(const PlanSummary& s) {
  std::string o;
  absl::StrAppendFormat(&o, "total bytes moved: %d (%s)\n", s.total_bytes,
                        HumanBytes(s.total_bytes));
  absl::StrAppendFormat(&o, "trainer ranks: %d, engine ranks: %d\n",
                        s.src_world, s.dst_world);
  absl::StrAppendFormat(&o, "sent per trainer rank: max %s, mean %s\n",
                        HumanBytes(s.sent_max),
                        HumanBytes(static_cast<int64_t>(s.sent_mean)));
  o += "  busiest senders:";
  for (const RankBytes& r : s.busiest_senders) {
    absl::StrAppendFormat(&o, " %d (%s)", r.rank, HumanBytes(r.bytes));
  }
  absl::StrAppendFormat(&o, "\nreceived per engine rank: max %s, mean %s\n",
                        HumanBytes(s.received_max),
                        HumanBytes(static_cast<int64_t>(s.received_mean)));
  o += "  busiest receivers:";
  for (const RankBytes& r : s.busiest_receivers) {
    absl::StrAppendFormat(&o, " %d (%s)", r.rank, HumanBytes(r.bytes));
  }
  absl::StrAppendFormat(&o,
                        "\ntransfers (segments): %d, messages: %d, rounds: %d\n",
                        s.num_segments, s.num_messages, s.num_rounds);
  o += "message sizes:\n";
  for (const HistogramBin& b : s.histogram) {
    absl::StrAppendFormat(&o, "  %-22s %8d messages  %s\n", b.label, b.count,
                          HumanBytes(b.bytes));
  }
  absl::StrAppendFormat(&o, "peak staging per rank: trainer %s, engine %s\n",
                        HumanBytes(s.peak_staging_src),
                        HumanBytes(s.peak_staging_dst));
  absl::StrAppendFormat(&o, "intra-host bytes: %s, inter-host bytes: %s\n",
                        HumanBytes(s.intra_host_bytes),
                        HumanBytes(s.inter_host_bytes));
  absl::StrAppendFormat(&o, "predicted refit time: %.3f s (slowest: %s)\n",
                        s.predicted_seconds,
                        s.slowest_rank.empty() ? "none" : s.slowest_rank);
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
  j["rounds"] = s.num_rounds;
  nlohmann::json h = nlohmann::json::array();
  for (const HistogramBin& b : s.histogram) {
    h.push_back({{"label", b.label}, {"lo", b.lo}, {"hi", b.hi},
                 {"count", b.count}, {"bytes", b.bytes}});
  }
  j["message_size_histogram"] = h;
  j["peak_staging"] = {{"trainer", s.peak_staging_src},
                       {"engine", s.peak_staging_dst}};
  j["intra_host_bytes"] = s.intra_host_bytes;
  j["inter_host_bytes"] = s.inter_host_bytes;
  j["predicted_seconds"] = s.predicted_seconds;
  j["slowest_rank"] = s.slowest_rank;
  j["heatmap"] = {{"rows", s.heat_rows_label}, {"cols", "engine host"},
                  {"bytes", s.heat}};
  return j.dump(2) + "\n";
}

std::string RenderHeatmapSvg(const PlanSummary& s, const std::string& title) {
  const int rows = static_cast<int>(s.heat.size());
  const int cols = rows ? static_cast<int>(s.heat[0].size()) : 0;
  int64_t mx = 0;
  for (const auto& r : s.heat) for (int64_t v : r) mx = std::max(mx, v);
  const int cell = std::max(12, std::min(40, 640 / std::max(1, std::max(rows, cols))));
  const int left = 150, top = 70;
  const int w = left + cols * cell + 180, h = top + rows * cell + 80;
  auto color = [&](int64_t v) {
    if (v == 0) return std::string("#f4f4f4");
    double t = mx > 0 ? static_cast<double>(v) / mx : 0;
    // white-ish yellow -> dark red
    int r = static_cast<int>(255 - 75 * t);
    int g = static_cast<int>(230 - 220 * t);
    int b = static_cast<int>(120 - 110 * t);
    return absl::StrFormat("#%02x%02x%02x", r, g, b);
  };
  std::string o = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"20\" font-size=\"15\">%s</text>\n"
      "<text x=\"%d\" y=\"%d\">engine host (columns)</text>\n"
      "<text x=\"10\" y=\"%d\">%s (rows)</text>\n",
      w, h, title, left, top - 28, top - 10, s.heat_rows_label);
  const int step_c = std::max(1, cols / 16), step_r = std::max(1, rows / 32);
  for (int c = 0; c < cols; c += step_c) {
    absl::StrAppendFormat(&o, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%d</text>\n",
                          left + c * cell + cell / 2, top - 4, c);
  }
  for (int r = 0; r < rows; ++r) {
    if (r % step_r == 0) {
      absl::StrAppendFormat(&o, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%d</text>\n",
                            left - 6, top + r * cell + cell / 2 + 4, r);
    }
    for (int c = 0; c < cols; ++c) {
      absl::StrAppendFormat(
          &o,
          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" "
          "stroke=\"white\" stroke-width=\"0.5\"><title>%s %d -> engine host "
          "%d: %s</title></rect>\n",
          left + c * cell, top + r * cell, cell, cell, color(s.heat[r][c]),
          s.heat_rows_label, r, c, HumanBytes(s.heat[r][c]));
    }
  }
  // Legend.
  const int lx = left + cols * cell + 30, ly = top;
  o += absl::StrFormat("<text x=\"%d\" y=\"%d\">bytes</text>\n", lx, ly - 8);
  for (int i = 0; i <= 10; ++i) {
    int64_t v = mx * (10 - i) / 10;
    absl::StrAppendFormat(&o,
                          "<rect x=\"%d\" y=\"%d\" width=\"20\" height=\"18\" "
                          "fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
                          lx, ly + i * 18, color(v), lx + 26, ly + i * 18 + 13,
                          HumanBytes(v));
  }
  absl::StrAppendFormat(&o, "<text x=\"10\" y=\"%d\">total %s, predicted %.3f s</text>\n",
                        h - 20, HumanBytes(s.total_bytes), s.predicted_seconds);
  o += "</svg>\n";
  return o;
}

}  // namespace refit
