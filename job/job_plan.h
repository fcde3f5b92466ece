// A refit job's plan from its specs: the model, the trainer's convention,
// the engines' conventions and where every rank runs go through the mapping
// tables (mapping/) into the two sides' layouts, and the planner
// (plan/planner.h) builds the plan. refitd (server/default_plan.h) and
// `refit plan` (cli/) both build plans here, so equal inputs give the
// same plan and fingerprint.
#ifndef REFIT_JOB_JOB_PLAN_H_
#define REFIT_JOB_JOB_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mapping/layout_builder.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "plan/plan.h"

namespace refit {

// One engine of a job: its id and convention.
struct JobEngine {
  std::string id;
  EngineSpec spec;
};

// Where every rank runs: a host name per trainer rank and per destination
// rank (the engines' ranks one engine after the other, in JobSpec order).
// Both empty: unknown (the planner counts every pair as inter-host).
// Optionally the GPU of each rank, named within its host (a CUDA device
// UUID, a PCI bus id, an index: any name; ranks with equal host and GPU
// names share one GPU): both empty, or one entry per rank, "" where a
// rank's GPU is unknown.
struct JobPlacement {
  std::vector<std::string> trainer_hosts;
  std::vector<std::string> engine_hosts;
  std::vector<std::string> trainer_gpus;
  std::vector<std::string> engine_gpus;
};

// Returns the placement of the shorthand: `gpus_per_host` GPUs per host
// (>= 1); trainer rank r on host r / gpus_per_host; engine rank r on the
// same host as trainer rank r when `colocated`, else on the hosts after the
// trainer's (ceil(trainer_world / gpus_per_host) + r / gpus_per_host).
// Hosts are named "host<i>"; rank r's GPU on its host is "gpu<r %
// gpus_per_host>", so with `colocated` engine rank r shares trainer rank
// r's GPU.
JobPlacement ShorthandPlacement(int32_t trainer_world, int32_t engine_world,
                                int32_t gpus_per_host, bool colocated);

struct JobSpec {
  ModelConfig model;
  TrainerSpec trainer;
  std::vector<JobEngine> engines;
  JobPlacement placement;
  PlannerOptions planner;
};

// The mapped layouts of a job, before placement and planning.
struct JobLayouts {
  MappedSide trainer;
  std::vector<MappedSide> engines;  // parallel to JobSpec::engines
};

// Returns the trainer's and every engine's layout. Fails with
// INVALID_ARGUMENT naming the side (trainer, engine 'id') when the
// convention cannot hold the model (the mapping's message), or when there
// is no engine.
absl::StatusOr<JobLayouts> MapJob(const ModelConfig& model,
                                  const TrainerSpec& trainer,
                                  const std::vector<JobEngine>& engines);

// Returns the plan of mapped layouts under `placement`: the engines' ranks
// are numbered one after the other (engine e's rank r is destination rank
// offset(e) + r), host names become host indices and (host, GPU) names GPU
// indices, each in order of first appearance (trainer ranks first, then
// destination ranks), and BuildPlan runs with `options`. Fails with
// INVALID_ARGUMENT when the placement's sizes differ from the world sizes,
// a host name is empty or GPUs are given without hosts, when two engines
// hold different logical tensors (naming the first difference), or with
// BuildPlan's error.
absl::StatusOr<Plan> PlanJob(JobLayouts layouts,
                             const std::vector<JobEngine>& engines,
                             const JobPlacement& placement,
                             const PlannerOptions& options);

// The --relay flag that refitd and `refit plan` both take (declared from
// these, so that both plan alike by default): "on" lets engine ranks
// forward bytes to other engine replicas (PlannerOptions::relay), "off"
// sends every byte from a trainer rank.
inline constexpr char kRelayFlagDefault[] = "off";
inline constexpr char kRelayFlagHelp[] =
    "on: engine ranks forward the bytes they received to other engine\n"
    "replicas (relays), so the trainer sends each byte about once and the\n"
    "refit time stays flat in the number of replicas; off: every byte comes\n"
    "from a trainer rank";

// Returns true for "on", false for "off"; INVALID_ARGUMENT naming --relay
// for anything else.
absl::StatusOr<bool> ParseRelayFlag(absl::string_view value);

// MapJob then PlanJob. Fails as they do.
absl::StatusOr<Plan> BuildJobPlan(const JobSpec& spec);

}  // namespace refit

#endif  // REFIT_JOB_JOB_PLAN_H_
