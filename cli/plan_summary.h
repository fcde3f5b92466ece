// Summary of a transfer Plan for `refit plan`: bytes per rank, message
// histogram, staging peaks and a predicted refit time under a simple link
// model. Independent of mapping: works on any Plan (plan/plan.h).
#ifndef REFIT_TOOLS_CLI_PLAN_SUMMARY_H_
#define REFIT_TOOLS_CLI_PLAN_SUMMARY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/plan.h"

namespace refit {

// Link model. Host placement when the plan has none (SideLayout::
// host_of_rank on both sides; `refit plan` always gives the plan one) and
// the shorthands of `refit plan` (documented in --help; job/job_plan.h's
// ShorthandPlacement):
//  * colocated == false (default): trainer and engine GPUs are on separate
//    hosts: trainer rank r on host r / gpus_per_host, engine rank r on host
//    ceil(T / gpus_per_host) + r / gpus_per_host. Every transfer then crosses
//    hosts and uses the network bandwidth.
//  * colocated == true: trainer rank r and engine rank r share host
//    r / gpus_per_host and one GPU; a transfer between them is a copy on
//    that GPU, between other ranks of one host it uses NVLink.
struct LinkModel {
  int32_t gpus_per_host = 8;
  bool colocated = false;
  double same_gpu_gbps = 1900.0;  // GB/s (1e9 bytes/s), a copy within one GPU
  double nvlink_gbps = 370.0;     // GB/s per GPU, intra-host
  double net_gbps = 50.0;         // GB/s per GPU, inter-host
  double host_gbps = 25.0;        // GB/s, pinned host memory to its GPU (staged engines' overflow)
};

struct RankBytes {
  int32_t rank = 0;
  int64_t bytes = 0;
};

struct HistogramBin {
  std::string label;     // e.g. "[64KiB, 1MiB)"
  int64_t lo = 0;        // inclusive
  int64_t hi = 0;        // exclusive; 0 = unbounded
  int64_t count = 0;
  int64_t bytes = 0;
};

struct PlanSummary {
  int64_t total_bytes = 0;
  int32_t src_world = 0;
  int32_t dst_world = 0;
  int64_t sent_max = 0;
  double sent_mean = 0;
  std::vector<RankBytes> busiest_senders;    // up to 5, bytes descending
  int64_t received_max = 0;
  double received_mean = 0;
  std::vector<RankBytes> busiest_receivers;  // up to 5
  // Relays: whether the plan was built with them (plan.options.relay), the
  // bytes engine ranks forward (max and mean over engine ranks, busiest up
  // to 5, none when no rank forwards) and the relay depth
  // (PlanStats::relay_depth).
  bool relay = false;
  int64_t forwarded_max = 0;
  double forwarded_mean = 0;
  std::vector<RankBytes> busiest_forwarders;
  int32_t relay_depth = 0;
  int64_t num_segments = 0;
  int64_t num_messages = 0;
  int64_t num_waves = 0;
  std::vector<HistogramBin> histogram;       // message sizes
  int64_t peak_staging_src = 0;              // max over src ranks
  int64_t peak_staging_dst = 0;              // max over dst ranks
  // Bytes per link class: within one GPU, between GPUs of one host, across
  // hosts (they add up to total_bytes).
  int64_t same_gpu_bytes = 0;
  int64_t intra_host_bytes = 0;
  int64_t inter_host_bytes = 0;
  double predicted_seconds = 0;              // slowest rank
  // The same plan with every member on host memory, moving over Gloo (TCP):
  // PredictedSeconds at GlooLinkSpeeds (plan/cost.h), what refitd predicts
  // for a job without GPUs.
  double gloo_predicted_seconds = 0;
  // plan.stats.lower_bound_seconds (0 when the plan has none, e.g. one read
  // from the wire): no replica choice beats it.
  double lower_bound_seconds = 0;
  // plan.stats.sender_lower_bound_seconds: the bound with trainer ranks as
  // the only senders (printed beside the relay-aware one).
  double sender_lower_bound_seconds = 0;
  // What the plan is of (set by the caller; printed when not empty).
  std::string fingerprint;
  std::string model;
  std::string trainer_spec;
  std::string engine_spec;
  // Where the engine stores tensors in other dtypes (plan.conversions):
  // the bytes and predicted time had the trainer's dtypes travelled (FP8
  // weights as BF16, no scales). Equal to the above without conversions.
  int64_t unconverted_bytes = 0;
  double unconverted_seconds = 0;
  int64_t converted_records = 0;             // plan.conversions.size()
  // The converted tensors (and their scales) alone: on the wire, and in
  // the trainer's dtypes.
  int64_t converted_wire_bytes = 0;
  int64_t converted_unconverted_bytes = 0;
  // converted_wire_bytes by format (ConversionFormatName: "fp8_block",
  // "mxfp8", "cast_f32", ...; codes and scales together), by name; and a
  // low-precision trainer's own tensors that travel as they are, under its
  // format ("mxfp8", "nvfp4", "fp8_block").
  std::vector<std::pair<std::string, int64_t>> wire_bytes_by_format;
  // Per conversion format (ConversionFormatName), by name: how many of
  // plan.conversions the colocated pull path runs in one pass (the engine
  // quantizes as it pulls) and how many in two (the trainer converts into
  // scratch, the engine pulls it), as the plan records it
  // (Conversion::one_pass, plan/one_pass.h).
  struct Passes {
    std::string format;
    int64_t one_pass = 0;
    int64_t two_passes = 0;
  };
  std::vector<Passes> passes_by_format;
  std::string slowest_rank;                  // e.g. "trainer rank 3" (MemberName)
  // The heat map, bytes [row][col], in one of two views:
  //  * "host": rows are the trainer hosts, columns the engine hosts, each
  //    side numbered from 0 on its own (heat_row_labels, heat_col_labels);
  //  * "gpu", for colocated plans (trainer and engine ranks share GPUs,
  //    whose hosts would collapse into one cell): rows are trainer ranks,
  //    columns engine ranks, one GPU each.
  // heat_row_hosts[i] / heat_col_hosts[j] is row i's / column j's host
  // (placement index): a cell whose two hosts are equal moved its bytes
  // within one host. In the "gpu" view heat_row_gpus / heat_col_gpus give
  // each rank's GPU; a cell on one host with equal GPUs is a copy within
  // one GPU. Row labels name the pipeline stages ("pp 0", "pp 0-1") when
  // SummarizePlan was given them.
  // Relays (engine to engine) are not in the heat map.
  std::string heat_unit = "host";
  // Per host (placement index), the bytes it sends to / receives from
  // other hosts, relays included: what its network link carries.
  std::vector<int64_t> host_sent;
  std::vector<int64_t> host_received;
  // Per host, the cross-host messages its ranks send or receive: the
  // transport frames each (Gloo: a header with the bytes, a notice the
  // other way), so a link carries a little more than its bytes.
  std::vector<int64_t> host_messages;
  std::vector<std::vector<int64_t>> heat;
  std::vector<int32_t> heat_row_hosts;
  std::vector<int32_t> heat_col_hosts;
  std::vector<int32_t> heat_row_gpus;
  std::vector<int32_t> heat_col_gpus;
  std::vector<std::string> heat_row_labels;
  std::vector<std::string> heat_col_labels;
};

// Host of trainer rank `r` / engine rank `r` under `link`'s shorthand (see
// LinkModel).
int32_t TrainerHost(const LinkModel& link, int32_t src_world, int32_t r);
int32_t EngineHost(const LinkModel& link, int32_t src_world, int32_t r);

// Summarizes `plan`: hosts (and GPUs, where gpu_of_rank is given on both
// sides) from the plan's placement when both sides have one, else from
// `link`'s shorthand; speeds from `link`. `src_stage`, when not empty, gives
// each trainer rank's pipeline stage (for the heat map's row labels). Fails
// with INVALID_ARGUMENT if gpus_per_host < 1, a bandwidth is not positive,
// a message names a rank outside its world, or src_stage is neither empty
// nor one per trainer rank.
absl::StatusOr<PlanSummary> SummarizePlan(const Plan& plan, const LinkModel& link,
                                          const std::vector<int32_t>& src_stage = {});

// Human-readable text (what `refit plan` prints).
std::string FormatSummaryText(const PlanSummary& s);
// The same as one JSON document.
std::string FormatSummaryJson(const PlanSummary& s);
// An SVG heat map of PlanSummary::heat with labels and a color legend.
std::string RenderHeatmapSvg(const PlanSummary& s, const std::string& title);

// A plan's sizes for people, in binary units as memory is counted:
// "1.50 GiB" (GiB = 2^30; round bytes and GB/s are decimal, common/round_bytes.h).
std::string HumanBinaryBytes(int64_t bytes);

}  // namespace refit

#endif  // REFIT_TOOLS_CLI_PLAN_SUMMARY_H_
