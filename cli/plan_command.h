// `refit plan`: model + trainer/engine specs -> mapping -> planner ->
// summary (text, JSON, SVG heat map). Flag parsing lives in refit_main.cc.
#ifndef REFIT_TOOLS_CLI_PLAN_COMMAND_H_
#define REFIT_TOOLS_CLI_PLAN_COMMAND_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "job/job_plan.h"
#include "cli/delta_prediction.h"
#include "cli/plan_summary.h"
#include "plan/host_delta.h"

namespace refit {

struct PlanCommandOptions {
  std::string model;    // built-in name or config.json path
  std::string trainer;  // "megatron:tp=..,pp=..." or "fsdp:dp=.."
  // "vllm:tp=..,dp=..[,ep=..]", or several engines (one model, engine
  // ranks numbered one engine after the other) joined by ';':
  // "vllm:tp=8;vllm:tp=4,dp=4".
  std::string engine;
  std::string dtype = "bf16";
  LinkModel link;        // speeds; gpus_per_host/colocated: the shorthand placement
  std::string hosts_file;  // each rank's host (ParseHostsFile); overrides the shorthand
  int64_t staging_mib = 512;
  int32_t lanes = 2;
  bool relay = false;  // --relay=on|off (job/job_plan.h)
  int64_t max_plan_mib = 16384;  // refuse plans estimated above this
  bool json = false;
  std::string heatmap;  // SVG path, empty = none
  bool timings = false;  // print each step's wall time on stderr
  // --delta=F: also predict a delta round with F of the elements changed
  // (< 0: none); --max_snapshot_mib: refuse a plan whose trainer rank needs
  // a larger delta snapshot (0: no bound).
  double delta = -1;
  int64_t max_snapshot_mib = 0;
  // With --delta: members on host memory (Gloo), and whether refitd --delta
  // runs their rounds delta or dense (--host_link_gbps, --host_codec_gbps).
  HostDeltaModel host_delta;
  // --engine_staging=BYTES|SHARE: engines are staged (docs/engines.md);
  // print each engine rank's device staging, host overflow and pause
  // (ParseEngineStaging; empty: not staged).
  std::string engine_staging;
};

// Runs the dry run and returns what to print on stdout. Fails with
// CheckPlannerFlags's INVALID_ARGUMENT (job/planner_flags.h); RESOURCE_EXHAUSTED naming
// --max_plan_mib when the plan's estimated size (EstimatePlanRecords) is
// over it, before any layout is built; or the mapping's or planner's status (INVALID_ARGUMENT naming the tensor, ranks or
// spec key) annotated with the step that failed.
absl::StatusOr<std::string> RunPlanCommand(const PlanCommandOptions& opt);

// Returns the placement of `trainer_world` trainer and `engine_world`
// engine ranks from the text of a hosts file: one rank per line,
// "trainer RANK HOST [GPU]" or "engine RANK HOST [GPU]"; blank lines and
// lines starting with '#' are skipped. GPUs are unknown where not given
// (none at all when no line gives one). Fails with INVALID_ARGUMENT naming the line for a
// malformed line, a rank out of range or listed twice, and naming the side
// and rank for a rank not listed.
absl::StatusOr<JobPlacement> ParseHostsFile(const std::string& text,
                                            int32_t trainer_world,
                                            int32_t engine_world);

// Parses "gpu=1900,nvlink=370,net=50" (any of the keys) into `link`
// (GB/s). INVALID_ARGUMENT on an unknown key or a non-positive number.
absl::Status ParseLinkSpec(const std::string& text, LinkModel* link);

}  // namespace refit

#endif  // REFIT_TOOLS_CLI_PLAN_COMMAND_H_
