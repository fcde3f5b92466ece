// The pause of staged engines, predicted (see staged_prediction.h).
#include "cli/staged_prediction.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "client/staged_buffers.h"
#include "nlohmann/json.hpp"

namespace refit {
namespace {

absl::Status BadStaging(const std::string& text) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--engine_staging '", text,
      "': give bytes (e.g. 8GiB, 536870912) or a share of each engine rank's weight bytes "
      "in (0, 1] (e.g. 0.5 or 50%)"));
}

}  // namespace

absl::StatusOr<EngineStaging> ParseEngineStaging(const std::string& text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  EngineStaging s;
  if (absl::ConsumeSuffix(&t, "%")) {
    double pct = 0;
    if (!absl::SimpleAtod(t, &pct) || !(pct > 0 && pct <= 100)) return BadStaging(text);
    s.share = pct / 100;
    return s;
  }
  if (absl::StrContains(t, '.')) {
    if (!absl::SimpleAtod(t, &s.share) || !(s.share > 0 && s.share <= 1)) {
      return BadStaging(text);
    }
    return s;
  }
  int shift = 0;
  if (absl::ConsumeSuffix(&t, "KiB")) {
    shift = 10;
  } else if (absl::ConsumeSuffix(&t, "MiB")) {
    shift = 20;
  } else if (absl::ConsumeSuffix(&t, "GiB")) {
    shift = 30;
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(t, &n) || n < 0 || n > (int64_t{1} << (62 - shift))) {
    return BadStaging(text);
  }
  s.bytes = n << shift;
  return s;
}

absl::StatusOr<StagedPrediction> PredictStaged(const Plan& plan, const LinkModel& link,
                                               const EngineStaging& staging) {
  if (!(link.same_gpu_gbps > 0) || !(link.host_gbps > 0)) {
    return absl::InvalidArgumentError(
        "--link: the gpu= and host= speeds of a staged engine's pause must be positive");
  }
  StagedPrediction p;
  const int32_t world = std::max(0, plan.dst.world_size);
  p.ranks.resize(world);
  for (int32_t r = 0; r < world; ++r) p.ranks[r].rank = r;
  for (const BufferSpec& b : plan.dst.buffers) {
    if (b.rank < 0 || b.rank >= world) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine buffer '", b.name, "' of rank ", b.rank, " outside the engine world ", world));
    }
    if (!b.scratch) p.ranks[b.rank].weight_bytes += b.byte_size;
  }
  // The budget and the split as a staged member makes them
  // (client/staged_buffers.h).
  std::vector<int64_t> budget(world, -1);
  for (int32_t r = 0; r < world; ++r) {
    budget[r] = StagingBudget(staging.bytes, staging.share, p.ranks[r].weight_bytes);
  }
  for (const BufferSpec& b : plan.dst.buffers) {
    if (b.scratch) continue;
    StagedRank& s = p.ranks[b.rank];
    const bool fast = StagedFast(budget[b.rank], s.device_bytes, b.byte_size);
    (fast ? s.device_bytes : s.overflow_bytes) += b.byte_size;
  }
  double longest = -1;
  for (StagedRank& s : p.ranks) {
    s.pause_seconds = s.device_bytes / (link.same_gpu_gbps * 1e9) +
                      s.overflow_bytes / (link.host_gbps * 1e9);
    if (s.pause_seconds > longest) {
      longest = s.pause_seconds;
      p.slowest_rank = s.rank;
    }
  }
  return p;
}

std::string FormatStagedText(const StagedPrediction& p, const LinkModel& link,
                             const EngineStaging& staging, double round_seconds) {
  std::string o = absl::StrCat(
      "staged engine (device staging up to ",
      staging.bytes >= 0 ? absl::StrCat(staging.bytes, " bytes")
                         : absl::StrFormat("%.4g of the bytes", staging.share),
      " per rank; the rest in pinned host memory; pause: device copy at ",
      absl::StrFormat("%.4g", link.same_gpu_gbps), " GB/s, host overflow at ",
      absl::StrFormat("%.4g", link.host_gbps), " GB/s):\n");
  for (const StagedRank& s : p.ranks) {
    absl::StrAppendFormat(&o,
                          "  engine rank %d: %d bytes staged on the device, %d bytes in host "
                          "overflow (of %d), pause %.4g ms\n",
                          s.rank, s.device_bytes, s.overflow_bytes, s.weight_bytes,
                          s.pause_seconds * 1e3);
  }
  if (p.slowest_rank >= 0) {
    const StagedRank& s = p.ranks[p.slowest_rank];
    absl::StrAppendFormat(&o,
                          "staged engine pause: longest %.4g ms (engine rank %d, %d bytes in host "
                          "overflow), %.4g of the predicted round %.4g s\n",
                          s.pause_seconds * 1e3, s.rank, s.overflow_bytes,
                          round_seconds > 0 ? s.pause_seconds / round_seconds : 0.0,
                          round_seconds);
  }
  return o;
}

std::string FormatStagedJson(const StagedPrediction& p, const LinkModel& link,
                             const EngineStaging& staging) {
  nlohmann::json j;
  j["budget_bytes"] = staging.bytes;
  if (staging.bytes < 0) j["budget_share"] = staging.share;
  j["device_copy_gbps"] = link.same_gpu_gbps;
  j["host_gbps"] = link.host_gbps;
  j["ranks"] = nlohmann::json::array();
  double longest = 0;
  for (const StagedRank& s : p.ranks) {
    j["ranks"].push_back({{"rank", s.rank},
                          {"weight_bytes", s.weight_bytes},
                          {"device_bytes", s.device_bytes},
                          {"overflow_bytes", s.overflow_bytes},
                          {"pause_seconds", s.pause_seconds}});
    longest = std::max(longest, s.pause_seconds);
  }
  j["longest_pause_seconds"] = longest;
  return j.dump();
}

}  // namespace refit
