// `refit simulate` implementation (see simulate_command.h).
#include "cli/simulate_command.h"

#include <sys/stat.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/member_name.h"
#include "common/status_macros.h"
#include "job/planner_flags.h"
#include "exec/executor.h"
#include "exec/transport/inproc_transport.h"
#include "mapping/mapping.h"
#include "mapping/parallel_spec.h"
#include "mapping/plan_size.h"
#include "mapping/scatter.h"
#include "plan/planner.h"
#include "testing/reference_copy.h"
#include "cli/plan_command.h"
#include "cli/safetensors.h"

namespace refit {
namespace {

std::string ShapeString(absl::Span<const int64_t> s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

// The checkpoint entry of `name`, checked against dtype and shape.
absl::StatusOr<const SafetensorsEntry*> Lookup(
    const SafetensorsCheckpoint& ckpt, const std::string& name, DType dtype,
    absl::Span<const int64_t> shape) {
  const SafetensorsEntry* e = ckpt.Find(name);
  if (e == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " is missing from the checkpoint"));
  }
  if (e->dtype != dtype || e->shape != std::vector<int64_t>(shape.begin(),
                                                             shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", name, ": the checkpoint has ", DTypeName(e->dtype),
        ShapeString(e->shape), " but the model config needs ",
        DTypeName(dtype), ShapeString(shape)));
  }
  return e;
}

// Returns `dir`/`name` with one slash between them ("/" + name for "/").
std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : absl::StrCat(dir, "/", name);
}

absl::Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("--out: cannot create ", path));
  }
  return absl::OkStatus();
}

absl::Status WriteSide(const MappedSide& side, const OwnedBuffers& bufs,
                       const std::string& dir) {
  REFIT_RETURN_IF_ERROR(MakeDir(dir));
  for (int32_t r = 0; r < side.layout.world_size; ++r) {
    std::vector<SafetensorsTensor> ts;
    for (int32_t b = side.rank_begin[r]; b < side.rank_begin[r + 1]; ++b) {
      ts.push_back({side.layout.buffers[b].name, side.buffer_info[b].dtype,
                    side.buffer_info[b].shape,
                    absl::MakeConstSpan(bufs.storage[b])});
    }
    const std::string path = absl::StrCat(dir, "/rank", r, ".safetensors");
    REFIT_RETURN_IF_ERROR(AnnotateStatus(
        WriteSafetensors(path, ts, {{"rank", absl::StrCat(r)}}), path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> RunSimulateCommand(
    const SimulateCommandOptions& opt) {
  REFIT_RETURN_IF_ERROR(CheckPlannerFlags(opt.staging_mib, opt.lanes,
                                             PlanCommandOptions().max_plan_mib));
  REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig(opt.model));
  if (!opt.dtype.empty()) {
    REFIT_RETURN_IF_ERROR(SetWeightDType(&model, opt.dtype));
  }
  REFIT_ASSIGN_OR_RETURN(TrainerSpec ts, ParseTrainerSpec(opt.trainer));
  REFIT_ASSIGN_OR_RETURN(EngineSpec es, ParseEngineSpec(opt.engine));
  REFIT_ASSIGN_OR_RETURN(int64_t records, EstimatePlanRecords(model, ts, {es}));
  REFIT_RETURN_IF_ERROR(CheckPlanBudget(
      records, PlanCommandOptions().max_plan_mib << 20, "the default --max_plan_mib"));
  REFIT_ASSIGN_OR_RETURN(MappedSide src, BuildTrainerLayout(model, ts));
  REFIT_ASSIGN_OR_RETURN(MappedSide dst, BuildEngineLayout(model, es));
  PlannerOptions po;
  po.staging_budget_bytes = opt.staging_mib << 20;
  po.num_lanes = opt.lanes;
  REFIT_ASSIGN_OR_RETURN(Plan plan, BuildPlan(src.layout, dst.layout, po));
  REFIT_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt,
                         SafetensorsCheckpoint::Open(opt.checkpoint));

  // Every logical tensor (or stacked member) must be in the checkpoint.
  const std::vector<TensorSpec>& tensors = src.layout.tensors;
  std::vector<std::vector<const SafetensorsEntry*>> entries(tensors.size());
  int64_t ckpt_bytes = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorSpec& spec = tensors[t];
    if (!spec.stacked) {
      REFIT_ASSIGN_OR_RETURN(const SafetensorsEntry* e,
                             Lookup(ckpt, spec.name, spec.dtype, spec.shape));
      entries[t].push_back(e);
      ckpt_bytes += e->data.size();
      continue;
    }
    absl::Span<const int64_t> member_shape =
        absl::MakeConstSpan(spec.shape).subspan(1);
    for (int64_t i = 0; i < spec.shape[0]; ++i) {
      REFIT_ASSIGN_OR_RETURN(
          const SafetensorsEntry* e,
          Lookup(ckpt, MemberName(spec, i), spec.dtype, member_shape));
      entries[t].push_back(e);
      ckpt_bytes += e->data.size();
    }
  }

  OwnedBuffers src_bufs = AllocateBuffers(src.layout);
  OwnedBuffers dst_bufs = AllocateBuffers(dst.layout);
  for (const Record& r : src.layout.records) {
    absl::Span<uint8_t> buf = absl::MakeSpan(src_bufs.storage[r.buffer]);
    const TensorSpec& spec = tensors[r.tensor];
    if (!spec.stacked) {
      REFIT_RETURN_IF_ERROR(
          ScatterToRecord(src.layout, r, -1, entries[r.tensor][0]->data, buf));
      continue;
    }
    for (int64_t i = r.box.origin(0); i < r.box.origin(0) + r.box.shape(0); ++i) {
      REFIT_RETURN_IF_ERROR(
          ScatterToRecord(src.layout, r, i, entries[r.tensor][i]->data, buf));
    }
  }

  // One thread per rank over the in-process transport.
  const int32_t world = src.layout.world_size + dst.layout.world_size;
  REFIT_ASSIGN_OR_RETURN(std::shared_ptr<InProcFabric> fabric,
                         InProcFabric::Create(world, opt.lanes));
  std::vector<absl::Status> status(world);
  std::vector<RunStats> stats(world);
  const absl::Time deadline = absl::Now() + opt.timeout;
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int32_t g = 0; g < world; ++g) {
    threads.emplace_back([&, g] {
      const bool is_src = g < src.layout.world_size;
      const Side side = is_src ? Side::kTrainer : Side::kEngine;
      const int32_t rank = is_src ? g : g - src.layout.world_size;
      OwnedBuffers& ob = is_src ? src_bufs : dst_bufs;
      std::vector<char*> ptrs;
      for (uint8_t* p : ob.ptrs) ptrs.push_back(reinterpret_cast<char*>(p));
      absl::Status st = [&]() -> absl::Status {
        REFIT_ASSIGN_OR_RETURN(std::unique_ptr<InProcTransport> tr,
                               InProcTransport::Create(fabric, g));
        REFIT_ASSIGN_OR_RETURN(
            std::unique_ptr<Executor> ex,
            Executor::Create(plan, side, rank, std::move(ptrs), tr.get()));
        REFIT_ASSIGN_OR_RETURN(stats[g], ex->Run(deadline));
        return absl::OkStatus();
      }();
      if (!st.ok()) {
        fabric->Kill(g);  // its peers fail fast instead of waiting
        status[g] = AnnotateStatus(
            st, MemberName(side == Side::kTrainer, "", rank));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (const absl::Status& st : status) REFIT_RETURN_IF_ERROR(st);

  // "sim/" and "sim" name one directory: paths below it get one slash.
  std::string out = opt.out;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  REFIT_RETURN_IF_ERROR(MakeDir(out));
  REFIT_RETURN_IF_ERROR(WriteSide(src, src_bufs, JoinPath(out, "trainer")));
  REFIT_RETURN_IF_ERROR(WriteSide(dst, dst_bufs, JoinPath(out, "engine")));
  int64_t moved = 0;
  for (const RunStats& s : stats) moved += s.bytes_received;
  return absl::StrCat(
      "model: ", opt.model, "\ncheckpoint: ", opt.checkpoint, " (",
      ckpt_bytes, " bytes)\ntrainer: ", TrainerSpecString(ts), " (",
      src.layout.world_size, " ranks)\nengine: ", EngineSpecString(es), " (",
      dst.layout.world_size, " ranks)\nkernel layout: ", KernelTraits(es.kernel).summary,
      "\nplan fingerprint: ", plan.fingerprint,
      "\nbytes moved: ", moved, " in ", plan.waves.size(), " waves, ",
      seconds, " s\nwrote ", JoinPath(out, "trainer/rank<k>.safetensors"), " and ",
      JoinPath(out, "engine/rank<k>.safetensors"), "\n");
}

}  // namespace refit
