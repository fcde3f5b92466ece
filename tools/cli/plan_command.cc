// `refit plan` implementation (see plan_command.h).
#include "tools/cli/plan_command.h"

#include <fstream>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "mapping/mapping.h"
#include "mapping/plan_size.h"
#include "plan/planner.h"

namespace refit {

absl::Status ParseLinkSpec(const std::string& text, LinkModel* link) {
  for (absl::string_view kv : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, '=');
    double v = 0;
    if (!absl::SimpleAtod(p.second, &v) || !(v > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--link: '", kv, "' needs a positive number of GB/s"));
    }
    if (p.first == "nvlink") {
      link->nvlink_gbps = v;
    } else if (p.first == "net") {
      link->net_gbps = v;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--link: unknown link class '", p.first, "' (nvlink, net)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPlanSizeOptions(int64_t staging_mib, int32_t lanes,
                                  int64_t max_plan_mib) {
  if (staging_mib < 1 || staging_mib > kMaxStagingMib) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--staging-mib ", staging_mib, ": must be 1..", kMaxStagingMib));
  }
  if (lanes < 1 || lanes > kMaxLanes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lanes ", lanes, ": must be 1..", kMaxLanes));
  }
  if (max_plan_mib < 1 || max_plan_mib > kMaxStagingMib) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-plan-mib ", max_plan_mib, ": must be 1..", kMaxStagingMib));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RunPlanCommand(const PlanCommandOptions& opt) {
  if (opt.model.empty() || opt.trainer.empty() || opt.engine.empty()) {
    return absl::InvalidArgumentError(
        "--model, --trainer and --engine are required");
  }
  absl::Time t0 = absl::Now();
  auto lap = [&](const char* step) {
    if (!opt.timings) return;
    absl::Time now = absl::Now();
    std::cerr << "timing: " << step << " "
              << absl::ToDoubleSeconds(now - t0) << " s\n";
    t0 = now;
  };
  REFIT_RETURN_IF_ERROR(CheckPlanSizeOptions(opt.staging_mib, opt.lanes, opt.max_plan_mib));
  REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig(opt.model));
  REFIT_RETURN_IF_ERROR(SetWeightDType(&model, opt.dtype));
  REFIT_ASSIGN_OR_RETURN(TrainerSpec ts, ParseTrainerSpec(opt.trainer));
  REFIT_ASSIGN_OR_RETURN(EngineSpec es, ParseEngineSpec(opt.engine));
  REFIT_ASSIGN_OR_RETURN(int64_t records, EstimatePlanRecords(model, ts, {es}));
  REFIT_RETURN_IF_ERROR(CheckPlanBudget(records, opt.max_plan_mib << 20, "--max-plan-mib"));
  ts.gpus_per_host = es.gpus_per_host = opt.link.gpus_per_host;
  lap("config+specs");
  REFIT_ASSIGN_OR_RETURN(MappedSide src, BuildTrainerLayout(model, ts));
  lap("trainer layout");
  REFIT_ASSIGN_OR_RETURN(MappedSide dst, BuildEngineLayout(model, es));
  lap("engine layout");
  PlannerOptions po;
  po.staging_budget_bytes = opt.staging_mib << 20;
  po.num_lanes = opt.lanes;
  REFIT_ASSIGN_OR_RETURN(Plan plan, BuildPlan(std::move(src.layout), std::move(dst.layout), po));
  lap("planner");
  if (opt.timings) {
    for (const auto& [phase, sec] : plan.stats.phase_seconds) {
      std::cerr << "timing:   planner " << phase << " " << sec << " s\n";
    }
  }
  REFIT_ASSIGN_OR_RETURN(PlanSummary s, SummarizePlan(plan, opt.link));
  lap("summary");
  if (!opt.heatmap.empty()) {
    std::ofstream f(opt.heatmap);
    f << RenderHeatmapSvg(s, absl::StrCat(opt.model, ": ", opt.trainer,
                                          " -> ", opt.engine));
    if (!f) {
      return absl::InvalidArgumentError(
          absl::StrCat("--heatmap: cannot write ", opt.heatmap));
    }
  }
  if (opt.json) return FormatSummaryJson(s);
  std::string out = absl::StrCat("model: ", opt.model, " (", opt.dtype,
                                 ")\ntrainer: ", TrainerSpecString(ts),
                                 "\nengine: ", EngineSpecString(es), "\n");
  if (ts.kind == TrainerSpec::Kind::kMegatron && ts.pp > 1 &&
      ts.first == 0 && ts.last == 0) {
    auto layers = PipelineStageLayers(model.num_layers, ts);
    if (layers.ok()) {
      absl::StrAppend(&out, "pipeline stages split evenly (no first=/last=): ",
                      absl::StrJoin(*layers, ","), " layers\n");
    }
  }
  absl::StrAppend(&out, "plan fingerprint: ", plan.fingerprint, "\n",
                  FormatSummaryText(s));
  return out;
}

}  // namespace refit
