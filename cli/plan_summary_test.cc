// Tests of the plan summary on hand-made Plans (no mapping, no planner).
#include "cli/plan_summary.h"

#include <cstdio>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace refit {
namespace {

Message Msg(int32_t src, int32_t dst, int32_t round, int64_t bytes) {
  Message m;
  m.src_rank = src;
  m.dst_rank = dst;
  m.wave = round;
  m.bytes = bytes;
  return m;
}

// 4 trainer ranks (2 per host), 2 engine ranks.
Plan HandPlan() {
  Plan p;
  p.src.world_size = 4;
  p.dst.world_size = 2;
  p.segments.resize(5);
  p.messages = {Msg(0, 0, 0, 1000), Msg(1, 0, 0, 3000), Msg(2, 1, 1, 8 << 20),
                Msg(3, 1, 1, 100), Msg(0, 1, 1, 5000)};
  p.waves.resize(2);
  p.stats.staging_src = {10, 20, 300, 5};
  p.stats.staging_dst = {40, 7};
  return p;
}

TEST(PlanSummaryTest, SeparateHostsAllNetwork) {
  LinkModel link;
  link.gpus_per_host = 2;
  link.net_gbps = 1.0;  // 1e9 B/s
  auto s = SummarizePlan(HandPlan(), link);
  ASSERT_TRUE(s.ok()) << s.status();
  const int64_t total = 1000 + 3000 + (8 << 20) + 100 + 5000;
  EXPECT_EQ(s->total_bytes, total);
  EXPECT_EQ(s->sent_max, 8 << 20);
  EXPECT_EQ(s->busiest_senders[0].rank, 2);
  EXPECT_EQ(s->busiest_senders[1].rank, 0);  // 6000 bytes
  EXPECT_EQ(s->busiest_senders[1].bytes, 6000);
  EXPECT_EQ(s->received_max, (8 << 20) + 100 + 5000);
  EXPECT_DOUBLE_EQ(s->received_mean, total / 2.0);
  EXPECT_EQ(s->num_segments, 5);
  EXPECT_EQ(s->num_messages, 5);
  EXPECT_EQ(s->num_waves, 2);
  EXPECT_EQ(s->peak_staging_src, 300);
  EXPECT_EQ(s->peak_staging_dst, 40);
  EXPECT_EQ(s->intra_host_bytes, 0);
  EXPECT_EQ(s->inter_host_bytes, total);
  // Engine rank 1 receives the most; all at 1e9 B/s.
  EXPECT_NEAR(s->predicted_seconds, ((8 << 20) + 5100) / 1e9, 1e-12);
  EXPECT_EQ(s->slowest_rank, "engine rank 1");
  int64_t count = 0, bytes = 0;
  for (const auto& b : s->histogram) {
    count += b.count;
    bytes += b.bytes;
  }
  EXPECT_EQ(count, 5);
  EXPECT_EQ(bytes, total);
  // Heat: trainer hosts {0,1} x engine host {0}.
  ASSERT_EQ(s->heat.size(), 2u);
  ASSERT_EQ(s->heat[0].size(), 1u);
  EXPECT_EQ(s->heat[0][0], 1000 + 3000 + 5000);
  EXPECT_EQ(s->heat[1][0], (8 << 20) + 100);
}

TEST(PlanSummaryTest, GlooPredictionIsTheSlowestRankAtTcpSpeeds) {
  // The plan places nothing: every pair counts as between hosts, 1.25 GB/s
  // over Gloo; engine rank 1 receives the most.
  auto s = SummarizePlan(HandPlan(), LinkModel{});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NEAR(s->gloo_predicted_seconds, ((8 << 20) + 5100) / 1.25e9, 1e-12);
  EXPECT_GT(s->gloo_predicted_seconds, 10 * s->predicted_seconds);
  const std::string text = FormatSummaryText(*s);
  EXPECT_NE(text.find("predicted over Gloo (members on host memory, TCP: 1 GB/s within a "
                      "host, 1.25 GB/s between hosts): 0.007 s\n"),
            std::string::npos)
      << text;
  EXPECT_NEAR(nlohmann::json::parse(FormatSummaryJson(*s))["gloo_predicted_seconds"]
                  .get<double>(),
              s->gloo_predicted_seconds, 1e-12);
}

TEST(PlanSummaryTest, ColocatedUsesNvlinkOnSameHost) {
  LinkModel link;
  link.gpus_per_host = 2;
  link.colocated = true;
  link.nvlink_gbps = 100.0;
  link.net_gbps = 1.0;
  auto s = SummarizePlan(HandPlan(), link);
  ASSERT_TRUE(s.ok()) << s.status();
  // Engine ranks 0,1 are on host 0 with trainer ranks 0,1, engine rank 0
  // on trainer rank 0's GPU.
  EXPECT_EQ(s->same_gpu_bytes, 1000);
  EXPECT_EQ(s->intra_host_bytes, 3000 + 5000);
  EXPECT_EQ(s->inter_host_bytes, (8 << 20) + 100);
  // Engine rank 1: 8MiB+100 over net + 5000 over nvlink.
  EXPECT_NEAR(s->predicted_seconds, ((8 << 20) + 100) / 1e9 + 5000 / 100e9,
              1e-12);
}

TEST(PlanSummaryTest, PlanPlacementOverridesShorthandAndHeatIsHostToHost) {
  Plan p = HandPlan();
  // Trainer ranks 0,1 on host 0 and 2,3 on host 1; engine rank 0 on host 1,
  // engine rank 1 on host 2.
  p.src.host_of_rank = {0, 0, 1, 1};
  p.dst.host_of_rank = {1, 2};
  p.stats.lower_bound_seconds = 0.5;
  LinkModel link;  // shorthand: 8 GPUs per host, separate hosts (unused)
  link.nvlink_gbps = 100.0;
  link.net_gbps = 1.0;
  auto s = SummarizePlan(p, link);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->heat_unit, "host");
  EXPECT_EQ(s->heat_row_hosts, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(s->heat_col_hosts, (std::vector<int32_t>{1, 2}));
  // Engine hosts are numbered from 0 on their own, not after the trainers'.
  EXPECT_EQ(s->heat_col_labels, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(s->heat[0][0], 1000 + 3000);
  EXPECT_EQ(s->heat[0][1], 5000);
  EXPECT_EQ(s->heat[1][0], 0);
  EXPECT_EQ(s->heat[1][1], (8 << 20) + 100);
  EXPECT_EQ(s->intra_host_bytes, 0);
  EXPECT_DOUBLE_EQ(s->lower_bound_seconds, 0.5);
  p.dst.host_of_rank = {0, 1};
  s = SummarizePlan(p, link);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->intra_host_bytes, 1000 + 3000 + (8 << 20) + 100);
  EXPECT_EQ(s->inter_host_bytes, 5000);
  const std::string svg = RenderHeatmapSvg(*s, "t");
  EXPECT_NE(svg.find("(intra-host)"), std::string::npos);
  EXPECT_NE(svg.find("(inter-host)"), std::string::npos);
  EXPECT_NE(svg.find("within one host"), std::string::npos);
  // With GPUs: engine rank 0 on trainer rank 0's GPU, engine rank 1 on
  // trainer rank 2's; the copies on one GPU at their own speed.
  p.src.gpu_of_rank = {0, 1, 2, 3};
  p.dst.gpu_of_rank = {0, 2};
  link.same_gpu_gbps = 1000.0;
  s = SummarizePlan(p, link);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->same_gpu_bytes, 1000 + (8 << 20));
  EXPECT_EQ(s->intra_host_bytes, 3000 + 100);
  EXPECT_EQ(s->inter_host_bytes, 5000);
  EXPECT_NEAR(s->predicted_seconds, 5000 / 1e9 + (8 << 20) / 1000e9 + 100 / 100e9, 1e-12);
  const auto j = nlohmann::json::parse(FormatSummaryJson(*s));
  EXPECT_EQ(j["bytes_by_link"]["same_gpu"], 1000 + (8 << 20));
  EXPECT_EQ(j["same_gpu_bytes"], 1000 + (8 << 20));
  EXPECT_NE(FormatSummaryText(*s).find("same-GPU bytes: 8.00 MiB"), std::string::npos)
      << FormatSummaryText(*s);
}

// What each host's link carries: its cross-host bytes, relays (engine to
// engine) counted at the relaying engine's host.
TEST(PlanSummaryTest, HostBytesCountRelaysAtTheRelayingHost) {
  Plan p = HandPlan();
  // Trainer ranks on host 0; engine rank 0 on host 1, engine rank 1 on host 2.
  p.src.host_of_rank = {0, 0, 0, 0};
  p.dst.host_of_rank = {1, 2};
  p.dst.world_size = 3;
  p.dst.host_of_rank.push_back(2);  // engine rank 2 beside engine rank 1
  Message fwd = Msg(0, 1, 2, 700);  // engine rank 0 forwards to rank 1
  fwd.relay = true;
  Message local = Msg(1, 2, 2, 90);  // engine rank 1 to 2: within host 2
  local.relay = true;
  p.messages.push_back(fwd);
  p.messages.push_back(local);
  p.stats.staging_dst.push_back(0);
  auto s = SummarizePlan(p, LinkModel());
  ASSERT_TRUE(s.ok()) << s.status();
  const int64_t to0 = 1000 + 3000, to1 = (8 << 20) + 100 + 5000;
  EXPECT_EQ(s->host_sent, (std::vector<int64_t>{to0 + to1, 700, 0}));
  EXPECT_EQ(s->host_received, (std::vector<int64_t>{0, to0, to1 + 700}));
  // Cross-host messages each host's ranks send or receive (the local
  // relay within host 2 not among them).
  EXPECT_EQ(s->host_messages, (std::vector<int64_t>{5, 2 + 1, 3 + 1}));
  const auto j = nlohmann::json::parse(FormatSummaryJson(*s));
  EXPECT_EQ(j["hosts"]["sent"][1], 700);
  EXPECT_EQ(j["hosts"]["received"][2], to1 + 700);
  EXPECT_EQ(j["hosts"]["messages"][2], 4);
}

TEST(PlanSummaryTest, AColocatedPlanGetsOneHeatmapCellPerGpuPair) {
  // 4 trainer ranks and 2 engine ranks on one host: the host view would be
  // one cell. Engine rank 0 shares trainer rank 0's GPU, engine rank 1
  // trainer rank 2's.
  Plan p = HandPlan();
  p.src.host_of_rank = {0, 0, 0, 0};
  p.dst.host_of_rank = {0, 0};
  p.src.gpu_of_rank = {0, 1, 2, 3};
  p.dst.gpu_of_rank = {0, 2};
  auto s = SummarizePlan(p, LinkModel{}, /*src_stage=*/{0, 0, 1, 1});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->heat_unit, "gpu");
  ASSERT_EQ(s->heat.size(), 4u);
  ASSERT_EQ(s->heat[0].size(), 2u);
  EXPECT_EQ(s->heat[0][0], 1000);
  EXPECT_EQ(s->heat[1][0], 3000);
  EXPECT_EQ(s->heat[2][1], 8 << 20);
  EXPECT_EQ(s->heat[3][1], 100);
  EXPECT_EQ(s->heat[0][1], 5000);
  // Pipeline stages label the rows.
  EXPECT_EQ(s->heat_row_labels, (std::vector<std::string>{"0 pp 0", "1 pp 0", "2 pp 1",
                                                          "3 pp 1"}));
  const std::string svg = RenderHeatmapSvg(*s, "t");
  EXPECT_NE(svg.find("trainer rank 0 pp 0 (host 0) -> engine rank 0 (host 0): 1000 B "
                     "(same GPU)"),
            std::string::npos)
      << svg;
  EXPECT_NE(svg.find("trainer rank 1 pp 0 (host 0) -> engine rank 0 (host 0): 2.93 KiB "
                     "(intra-host)"),
            std::string::npos);
  EXPECT_NE(svg.find("within one GPU"), std::string::npos);
  const auto j = nlohmann::json::parse(FormatSummaryJson(*s));
  EXPECT_EQ(j["heatmap"]["rows"], "trainer rank (one GPU each)");
  EXPECT_EQ(j["heatmap"]["row_labels"][2], "2 pp 1");
  // The stages of the ranks on one host label its row in the host view.
  p.src.gpu_of_rank.clear();
  p.dst.gpu_of_rank.clear();
  p.src.host_of_rank = {0, 0, 1, 1};
  p.dst.host_of_rank = {2, 2};
  s = SummarizePlan(p, LinkModel{}, {0, 1, 1, 1});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->heat_unit, "host");
  EXPECT_EQ(s->heat_row_labels, (std::vector<std::string>{"0 pp 0-1", "1 pp 1"}));
  EXPECT_EQ(s->heat_col_labels, (std::vector<std::string>{"0"}));
  EXPECT_EQ(SummarizePlan(p, LinkModel{}, {0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlanSummaryTest, HeatmapOfOneCellHoldsItsLegendAndTitle) {
  Plan p = HandPlan();
  p.src.host_of_rank = {0, 0, 0, 0};
  p.dst.host_of_rank = {1, 1};
  auto s = SummarizePlan(p, LinkModel{});
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->heat.size(), 1u);
  const std::string title(90, 'x');
  const std::string svg = RenderHeatmapSvg(*s, title);
  int w = 0, h = 0;
  ASSERT_EQ(sscanf(svg.c_str(), "<svg xmlns=\"http://www.w3.org/2000/svg\" "
                                "width=\"%d\" height=\"%d\"", &w, &h), 2);
  EXPECT_GE(w, 10 + 8 * 90);     // the title at ~8 px per character
  EXPECT_GE(h, 70 + 12 * 18 + 30);  // 11 legend steps, the outline key, footer
}

TEST(PlanSummaryTest, RejectsBadInputs) {
  LinkModel link;
  link.gpus_per_host = 0;
  EXPECT_EQ(SummarizePlan(HandPlan(), link).status().code(),
            absl::StatusCode::kInvalidArgument);
  Plan p = HandPlan();
  p.messages.push_back(Msg(9, 0, 0, 1));
  auto s = SummarizePlan(p, LinkModel{});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("9 -> 0"), std::string::npos);
}

TEST(PlanSummaryTest, JsonAndSvgCarryTheNumbers) {
  auto s = SummarizePlan(HandPlan(), LinkModel{});
  ASSERT_TRUE(s.ok());
  auto j = nlohmann::json::parse(FormatSummaryJson(*s));
  EXPECT_EQ(j["total_bytes"].get<int64_t>(), s->total_bytes);
  EXPECT_EQ(j["messages"].get<int64_t>(), 5);
  EXPECT_EQ(j["sent"]["busiest"][0]["rank"].get<int>(), 2);
  std::string text = FormatSummaryText(*s);
  EXPECT_NE(text.find("total bytes moved: " + std::to_string(s->total_bytes)),
            std::string::npos);
  std::string svg = RenderHeatmapSvg(*s, "t");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("engine host"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

// An MXFP8 weight (bf16 on the trainer) and its E8M0 scales, one message
// each: both count as mxfp8 on the wire; in the trainer's dtypes the codes
// weigh double and the scales nothing.
TEST(PlanSummaryTest, WireBytesByFormat) {
  Plan p;
  p.src.world_size = 1;
  p.dst.world_size = 1;
  p.src.tensors = {{"w", {4, 64}, DType::kF8E4M3, false},
                   {"w_scale", {4, 2}, DType::kU8, false},
                   {"n", {64}, DType::kBF16, false}};
  Record w, sc, n;
  w.tensor = 0;
  sc.tensor = 1;
  n.tensor = 2;
  p.src.records = {w, sc, n};
  Conversion c;
  c.kind = ConversionKind::kQuantize;
  c.format = QuantFormat::kMxfp8;
  c.from = w;
  p.conversions = {c};
  p.segments.resize(3);
  p.segments[0].src_record = 0;
  p.segments[0].bytes = 256;
  p.segments[1].src_record = 1;
  p.segments[1].bytes = 8;
  p.segments[2].src_record = 2;
  p.segments[2].bytes = 128;
  Message m = Msg(0, 0, 0, 392);
  m.first_segment = 0;
  m.num_segments = 3;
  p.messages = {m};
  p.waves.resize(1);
  auto s = SummarizePlan(p, LinkModel{});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->converted_wire_bytes, 264);
  EXPECT_EQ(s->converted_unconverted_bytes, 512);
  ASSERT_EQ(s->wire_bytes_by_format.size(), 1u);
  EXPECT_EQ(s->wire_bytes_by_format[0].first, "mxfp8");
  EXPECT_EQ(s->wire_bytes_by_format[0].second, 264);
  EXPECT_NE(FormatSummaryText(*s).find("on the wire by format: mxfp8 264"), std::string::npos)
      << FormatSummaryText(*s);
  EXPECT_EQ(nlohmann::json::parse(FormatSummaryJson(*s))["wire_bytes_by_format"]["mxfp8"], 264);
}

// Per format, the conversions the plan runs in one pass and in two
// (Conversion::one_pass), in the text and the JSON.
TEST(PlanSummaryTest, ConversionPassesByFormat) {
  Plan p;
  p.src.world_size = 1;
  p.dst.world_size = 1;
  p.src.tensors = {{"w", {128, 128}, DType::kF8E4M3, false}};
  p.src.records.resize(1);
  p.waves.resize(1);
  Conversion fp8;
  fp8.kind = ConversionKind::kQuantize;
  fp8.format = QuantFormat::kFp8Block;
  Conversion one = fp8, deepgemm = fp8;
  one.one_pass = true;
  one.one_pass_cell_rows = one.one_pass_cell_cols = 128;
  deepgemm.format = QuantFormat::kFp8BlockRequantUe8m0;
  p.conversions = {one, one, fp8, deepgemm};
  auto s = SummarizePlan(p, LinkModel{});
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->passes_by_format.size(), 2u);
  EXPECT_EQ(s->passes_by_format[0].format, "fp8_block");
  EXPECT_EQ(s->passes_by_format[0].one_pass, 2);
  EXPECT_EQ(s->passes_by_format[0].two_passes, 1);
  EXPECT_EQ(s->passes_by_format[1].format, "fp8_block_requant_ue8m0");
  EXPECT_EQ(s->passes_by_format[1].one_pass, 0);
  EXPECT_EQ(s->passes_by_format[1].two_passes, 1);
  const std::string text = FormatSummaryText(*s);
  EXPECT_NE(text.find("on the colocated pull path, conversions in one pass / two: "
                      "fp8_block 2 / 1, fp8_block_requant_ue8m0 0 / 1\n"),
            std::string::npos)
      << text;
  const auto j = nlohmann::json::parse(FormatSummaryJson(*s));
  EXPECT_EQ(j["conversion_passes"]["fp8_block"]["one_pass"], 2);
  EXPECT_EQ(j["conversion_passes"]["fp8_block"]["two_passes"], 1);
  EXPECT_EQ(j["conversion_passes"]["fp8_block_requant_ue8m0"]["two_passes"], 1);
}

// An NVFP4 weight [4, 64] (bf16 on the trainer, 512 bytes): 128 bytes of
// packed codes, 16 e4m3 block scales and a 4-byte global scale, all nvfp4
// on the wire; in the trainer's dtypes the codes weigh four times as much,
// the scales nothing.
TEST(PlanSummaryTest, Nvfp4WireBytesCountPackedCodesAndBothScales) {
  Plan p;
  p.src.world_size = 1;
  p.dst.world_size = 1;
  p.src.tensors = {{"w", {4, 32}, DType::kU8, false},
                   {"w_scale", {4, 4}, DType::kF8E4M3, false},
                   {"w_scale_2", {}, DType::kF32, false}};
  Record w, sc, g;
  w.tensor = 0;
  sc.tensor = 1;
  g.tensor = 2;
  p.src.records = {w, sc, g};
  Conversion c;
  c.kind = ConversionKind::kQuantize;
  c.format = QuantFormat::kNvfp4;
  c.from_dtype = DType::kBF16;
  c.from = w;
  p.conversions = {c};
  p.segments.resize(3);
  const int64_t bytes[3] = {128, 16, 4};
  for (int k = 0; k < 3; ++k) {
    p.segments[k].src_record = k;
    p.segments[k].bytes = bytes[k];
  }
  Message m = Msg(0, 0, 0, 148);
  m.first_segment = 0;
  m.num_segments = 3;
  p.messages = {m};
  p.waves.resize(1);
  auto s = SummarizePlan(p, LinkModel{});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->converted_wire_bytes, 148);
  EXPECT_EQ(s->converted_unconverted_bytes, 512);
  ASSERT_EQ(s->wire_bytes_by_format.size(), 1u);
  EXPECT_EQ(s->wire_bytes_by_format[0].first, "nvfp4");
  EXPECT_EQ(s->wire_bytes_by_format[0].second, 148);
}

}  // namespace
}  // namespace refit
