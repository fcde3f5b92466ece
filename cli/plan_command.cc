// `refit plan` implementation (see plan_command.h).
#include "cli/plan_command.h"

#include <fstream>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "cli/staged_prediction.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "job/planner_flags.h"
#include "mapping/mapping.h"
#include "mapping/plan_size.h"
#include "mapping/split_advice.h"
#include "plan/planner.h"
#include "nlohmann/json.hpp"

namespace refit {

absl::Status ParseLinkSpec(const std::string& text, LinkModel* link) {
  for (absl::string_view kv : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, '=');
    double v = 0;
    if (!absl::SimpleAtod(p.second, &v) || !(v > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--link: '", kv, "' needs a positive number of GB/s"));
    }
    if (p.first == "gpu") {
      link->same_gpu_gbps = v;
    } else if (p.first == "nvlink") {
      link->nvlink_gbps = v;
    } else if (p.first == "net") {
      link->net_gbps = v;
    } else if (p.first == "host") {
      link->host_gbps = v;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--link: unknown link class '", p.first, "' (gpu, nvlink, net, host)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<JobPlacement> ParseHostsFile(const std::string& text,
                                            int32_t trainer_world,
                                            int32_t engine_world) {
  JobPlacement p;
  p.trainer_hosts.resize(trainer_world);
  p.engine_hosts.resize(engine_world);
  p.trainer_gpus.resize(trainer_world);
  p.engine_gpus.resize(engine_world);
  bool any_gpu = false;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> w =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    int32_t rank = -1;
    const bool trainer = !w.empty() && w[0] == "trainer";
    std::vector<std::string>* hosts = trainer ? &p.trainer_hosts : &p.engine_hosts;
    std::vector<std::string>* gpus = trainer ? &p.trainer_gpus : &p.engine_gpus;
    if (w.size() < 3 || w.size() > 4 || (!trainer && w[0] != "engine") ||
        !absl::SimpleAtoi(w[1], &rank) || rank < 0 ||
        rank >= static_cast<int32_t>(hosts->size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--hosts line ", line_no, ": '", line, "' is not \"trainer|engine RANK HOST [GPU]\" ",
          "with RANK below the side's world size (trainer ", trainer_world,
          ", engine ", engine_world, ")"));
    }
    if (!(*hosts)[rank].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--hosts line ", line_no, ": ", w[0], " rank ", rank, " listed twice"));
    }
    (*hosts)[rank] = std::string(w[2]);
    if (w.size() == 4) {
      (*gpus)[rank] = std::string(w[3]);
      any_gpu = true;
    }
  }
  if (!any_gpu) {
    p.trainer_gpus.clear();
    p.engine_gpus.clear();
  }
  for (const auto* side : {&p.trainer_hosts, &p.engine_hosts}) {
    for (size_t r = 0; r < side->size(); ++r) {
      if ((*side)[r].empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--hosts: no host for ", side == &p.trainer_hosts ? "trainer" : "engine",
            " rank ", r));
      }
    }
  }
  return p;
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
  REFIT_RETURN_IF_ERROR(CheckPlannerFlags(opt.staging_mib, opt.lanes, opt.max_plan_mib));
  REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig(opt.model));
  REFIT_RETURN_IF_ERROR(SetWeightDType(&model, opt.dtype));
  REFIT_ASSIGN_OR_RETURN(TrainerSpec ts, ParseTrainerSpec(opt.trainer));
  std::vector<JobEngine> engines;
  std::vector<EngineSpec> specs;
  int32_t engine_world = 0;
  for (absl::string_view one : absl::StrSplit(opt.engine, ';')) {
    absl::StatusOr<EngineSpec> es = ParseEngineSpec(std::string(absl::StripAsciiWhitespace(one)));
    if (!es.ok() && opt.engine.find(';') != std::string::npos) {
      return AnnotateStatus(es.status(), absl::StrCat("--engine '", one, "'"));
    }
    REFIT_RETURN_IF_ERROR(es.status());
    engines.push_back(JobEngine{absl::StrCat("engine", engines.size()), *es});
    specs.push_back(*es);
    engine_world += es->world_size();
  }
  if (engines.size() == 1) engines[0].id = "engine";
  REFIT_ASSIGN_OR_RETURN(int64_t records, EstimatePlanRecords(model, ts, specs));
  REFIT_RETURN_IF_ERROR(CheckPlanBudget(records, opt.max_plan_mib << 20, "--max_plan_mib"));
  if (opt.link.gpus_per_host < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpus-per-host must be >= 1, got ", opt.link.gpus_per_host));
  }
  JobPlacement placement =
      ShorthandPlacement(ts.world_size(), engine_world, opt.link.gpus_per_host,
                         opt.link.colocated);
  if (!opt.hosts_file.empty()) {
    REFIT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(opt.hosts_file, 16 << 20));
    REFIT_ASSIGN_OR_RETURN(placement,
                           ParseHostsFile(text, ts.world_size(), engine_world));
  }
  lap("config+specs");
  absl::StatusOr<JobLayouts> mapped = MapJob(model, ts, engines);
  if (!mapped.ok()) {
    return specs.size() == 1 ? JobLayoutErrors(model, ts, specs[0], mapped.status())
                             : mapped.status();
  }
  JobLayouts layouts = *std::move(mapped);
  lap("layouts");
  PlannerOptions po;
  po.staging_budget_bytes = opt.staging_mib << 20;
  po.num_lanes = opt.lanes;
  po.relay = opt.relay;
  po.delta = opt.delta >= 0;  // the plan refitd --delta builds
  po.links.same_gpu_gbps = opt.link.same_gpu_gbps;
  po.links.intra_host_gbps = opt.link.nvlink_gbps;
  po.links.inter_host_gbps = opt.link.net_gbps;
  REFIT_ASSIGN_OR_RETURN(Plan plan, PlanJob(std::move(layouts), engines, placement, po));
  lap("planner");
  if (opt.timings) {
    for (const auto& [phase, sec] : plan.stats.phase_seconds) {
      std::cerr << "timing:   planner " << phase << " " << sec << " s\n";
    }
  }
  // Megatron rank k = (pp * DP + dp) * TP + tp: its stage labels the heat
  // map's rows.
  std::vector<int32_t> stages;
  if (ts.kind == TrainerSpec::Kind::kMegatron && ts.pp > 1) {
    for (int32_t k = 0; k < ts.world_size(); ++k) stages.push_back(k / ts.stage_size());
  }
  REFIT_ASSIGN_OR_RETURN(PlanSummary s, SummarizePlan(plan, opt.link, stages));
  REFIT_RETURN_IF_ERROR(CheckSnapshotBound(SnapshotBytesPerRank(plan),
                                           opt.max_snapshot_mib << 20, "--max_snapshot_mib"));
  std::string delta_text;
  if (opt.delta >= 0) {
    DeltaModel dm;
    dm.fraction = opt.delta;
    REFIT_ASSIGN_OR_RETURN(DeltaPrediction dp, PredictDelta(plan, opt.link, dm));
    delta_text = FormatDeltaText(dp, dm, s.predicted_seconds);
    absl::StrAppend(&delta_text, "members on host memory (Gloo), refitd --delta: ",
                    ChooseHostDelta(plan, opt.host_delta).reason, "\n");
  }
  std::string staged_text, staged_json;
  if (!opt.engine_staging.empty()) {
    REFIT_ASSIGN_OR_RETURN(EngineStaging staging, ParseEngineStaging(opt.engine_staging));
    REFIT_ASSIGN_OR_RETURN(StagedPrediction sp, PredictStaged(plan, opt.link, staging));
    staged_text = FormatStagedText(sp, opt.link, staging, s.predicted_seconds);
    staged_json = FormatStagedJson(sp, opt.link, staging);
  }
  s.fingerprint = plan.fingerprint;
  s.model = opt.model;
  s.trainer_spec = TrainerSpecString(ts);
  std::vector<std::string> engine_strings;
  for (const EngineSpec& es : specs) engine_strings.push_back(EngineSpecString(es));
  s.engine_spec = absl::StrJoin(engine_strings, ";");
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
  if (opt.json && staged_json.empty()) return FormatSummaryJson(s);
  if (opt.json) {
    nlohmann::json j = nlohmann::json::parse(FormatSummaryJson(s));
    j["staged_engine"] = nlohmann::json::parse(staged_json);
    return j.dump(2) + "\n";
  }
  std::string out = absl::StrCat("model: ", opt.model, " (", opt.dtype,
                                 ")\ntrainer: ", TrainerSpecString(ts),
                                 "\nengine: ", s.engine_spec, "\n");
  if (ts.kind == TrainerSpec::Kind::kMegatron && ts.pp > 1 &&
      ts.first == 0 && ts.last == 0) {
    auto layers = PipelineStageLayers(model.num_layers, ts);
    if (layers.ok()) {
      absl::StrAppend(&out, "pipeline stages split evenly (no first=/last=): ",
                      absl::StrJoin(*layers, ","), " layers\n");
    }
  }
  absl::StrAppend(&out, "plan fingerprint: ", plan.fingerprint, "\n",
                  FormatSummaryText(s), delta_text, staged_text);
  return out;
}

}  // namespace refit
