// The planner's first phases: options, each layout, and the tensor match.
#include "plan/internal/validate.h"

#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "layout/tensor_spec.h"

namespace refit {
namespace internal_plan {
namespace {

// Appends the problems of one side (`side` names it in the errors). Record
// checks are skipped once *errors is not empty: they assume valid tensors.
void ValidateSide(const SideLayout& s, const char* side,
                  std::vector<std::string>* errors) {
  if (s.world_size < 0) {
    errors->push_back(absl::StrCat(side, " world size ", s.world_size, " < 0"));
  }
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    absl::Status st = ValidateTensorSpec(s.tensors[i]);
    if (!st.ok()) {
      errors->push_back(absl::StrCat(side, ": ", st.message(),
                                     TensorPlace(s, static_cast<int32_t>(i))));
    }
  }
  if (!errors->empty()) return;
  for (const BufferSpec& b : s.buffers) {
    if (b.rank < 0 || b.rank >= s.world_size || b.byte_size < 0) {
      errors->push_back(absl::StrCat(side, " buffer ", b.name, " on rank ",
                                    b.rank, " of ", b.byte_size,
                                    " bytes: rank or size out of range"));
    }
  }
  for (const Record& r : s.records) {
    absl::Status st = ValidateRecord(s, r);
    if (!st.ok()) errors->push_back(absl::StrCat(side, ": ", st.message()));
  }
  if (!s.host_of_rank.empty() &&
      static_cast<int32_t>(s.host_of_rank.size()) != s.world_size) {
    errors->push_back(absl::StrCat(side, " host_of_rank has ",
                                  s.host_of_rank.size(), " entries for ",
                                  s.world_size, " ranks"));
  }
  if (!s.stage_of_rank.empty() &&
      static_cast<int32_t>(s.stage_of_rank.size()) != s.world_size) {
    errors->push_back(absl::StrCat(side, " stage_of_rank has ",
                                  s.stage_of_rank.size(), " entries for ",
                                  s.world_size, " ranks"));
  }
  for (int32_t st : s.stage_of_rank) {
    if (st < 0) {
      errors->push_back(absl::StrCat(side, " has a negative stage ", st));
      break;
    }
  }
  if (!s.gpu_of_rank.empty()) {
    if (static_cast<int32_t>(s.gpu_of_rank.size()) != s.world_size) {
      errors->push_back(absl::StrCat(side, " gpu_of_rank has ", s.gpu_of_rank.size(),
                                    " entries for ", s.world_size, " ranks"));
    } else if (s.host_of_rank.empty()) {
      errors->push_back(absl::StrCat(side, " gives GPUs (gpu_of_rank) but no hosts"));
    }
    for (size_t r = 0; r < s.gpu_of_rank.size(); ++r) {
      if (s.gpu_of_rank[r] < -1) {
        errors->push_back(absl::StrCat(side, " rank ", r, " has GPU ", s.gpu_of_rank[r],
                                      " (ids are >= 0, -1 for unknown)"));
        break;
      }
    }
  }
}

// Appends an error when one GPU id lies on two hosts (over both sides).
void ValidateGpuHosts(const SideLayout& src, const SideLayout& dst,
                      std::vector<std::string>* errors) {
  struct Seen {
    const char* side;
    int32_t rank;
    int32_t host;
  };
  std::map<int32_t, Seen> first;  // gpu id -> where it was first seen
  for (const auto& [side, s] : {std::pair<const char*, const SideLayout*>{"trainer", &src},
                                {"engine", &dst}}) {
    if (static_cast<int32_t>(s->gpu_of_rank.size()) != s->world_size ||
        static_cast<int32_t>(s->host_of_rank.size()) != s->world_size) {
      continue;  // no GPUs, or reported by ValidateSide
    }
    for (int32_t r = 0; r < s->world_size; ++r) {
      const int32_t g = s->gpu_of_rank[r];
      if (g < 0) continue;
      const auto [it, fresh] = first.emplace(g, Seen{side, r, s->host_of_rank[r]});
      if (fresh || it->second.host == s->host_of_rank[r]) continue;
      errors->push_back(absl::StrCat(
          "GPU ", g, " is on host ", it->second.host, " for ", it->second.side, " rank ",
          it->second.rank, " and on host ", s->host_of_rank[r], " for ", side, " rank ", r,
          ": a GPU lies on one host"));
      return;
    }
  }
}

}  // namespace

absl::Status ValidateOptions(const PlannerOptions& options) {
  if (options.num_lanes < 1 || options.num_lanes > kMaxLanes ||
      options.staging_budget_bytes < 1 ||
      options.max_message_bytes < 0 || options.direct_min_bytes < 0 ||
      options.max_wave_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid planner options: num_lanes ", options.num_lanes,
        ", staging_budget_bytes ", options.staging_budget_bytes,
        ", max_message_bytes ", options.max_message_bytes,
        ", direct_min_bytes ", options.direct_min_bytes,
        ", max_wave_bytes ", options.max_wave_bytes));
  }
  if (!(options.links.same_gpu_gbps > 0) || !(options.links.intra_host_gbps > 0) ||
      !(options.links.inter_host_gbps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid planner options: links.same_gpu_gbps ", options.links.same_gpu_gbps,
        ", links.intra_host_gbps ", options.links.intra_host_gbps,
        ", links.inter_host_gbps ", options.links.inter_host_gbps, " (all must be > 0)"));
  }
  return absl::OkStatus();
}

void ValidateLayouts(const SideLayout& src, const SideLayout& dst,
                     std::vector<std::string>* errors) {
  for (const TensorSpec& t : src.tensors) {
    if (t.transform != Transform::kNone) {
      errors->push_back(absl::StrCat("trainer tensor ", t.name, " has transform ",
                                     TransformName(t.transform),
                                     "; only the engine side may transform"));
    }
  }
  ValidateSide(src, "trainer", errors);
  ValidateSide(dst, "engine", errors);
  ValidateGpuHosts(src, dst, errors);
}

void MatchTensors(const SideLayout& src, const SideLayout& dst,
                  std::vector<int32_t>* dst_to_src,
                  std::vector<std::string>* errors) {
  absl::flat_hash_map<std::string, int32_t> src_by_name;
  for (size_t i = 0; i < src.tensors.size(); ++i) {
    if (!src_by_name.emplace(src.tensors[i].name, i).second) {
      errors->push_back(absl::StrCat("trainer tensor ", src.tensors[i].name,
                                    " is listed twice"));
    }
  }
  {
    absl::flat_hash_map<std::string, int32_t> seen;
    for (const TensorSpec& t : dst.tensors) {
      if (!seen.emplace(t.name, 0).second) {
        errors->push_back(absl::StrCat("engine tensor ", t.name, " is listed twice"));
      }
    }
  }
  dst_to_src->assign(dst.tensors.size(), -1);
  for (size_t i = 0; i < dst.tensors.size(); ++i) {
    const TensorSpec& t = dst.tensors[i];
    auto it = src_by_name.find(t.name);
    if (it == src_by_name.end()) {
      errors->push_back(absl::StrCat("engine tensor ", TensorSpecString(t),
                                    " has no trainer tensor of that name"));
      continue;
    }
    const TensorSpec& s = src.tensors[it->second];
    if (s.shape != t.shape || s.dtype != t.dtype || s.stacked != t.stacked ||
        s.format != t.format || s.quant_role != t.quant_role) {
      auto format = [](const TensorSpec& x) {
        return x.format ? absl::StrCat(" (", TensorFormatString(x), ")") : std::string();
      };
      errors->push_back(absl::StrCat(
          "tensor ", t.name, " differs: trainer ", TensorSpecString(s),
          s.stacked ? " (stacked)" : "", format(s), " vs engine ", TensorSpecString(t),
          t.stacked ? " (stacked)" : "", format(t)));
      continue;
    }
    (*dst_to_src)[i] = it->second;
  }
}

}  // namespace internal_plan
}  // namespace refit
