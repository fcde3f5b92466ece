// Test patterns in a Member's buffers (see member_patterns.h).
#include "testing/member_patterns.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/member_name.h"
#include "common/status_macros.h"
#include "mapping/model_config.h"
#include "mapping/model_family.h"
#include "testing/reference_copy.h"

namespace refit::testing {
namespace {

std::string Who(const MemberOptions& o) {
  return MemberName(o.side == Side::kTrainer, o.engine_id, o.rank);
}

// Host memory of each buffer of the member's rank layout: the host copy
// given, else the registered buffer (host members only).
absl::StatusOr<HostBuffers> PatternBuffers(
    const Member& member, const std::map<std::string, char*>& host) {
  const MemberOptions& o = member.options();
  const std::map<std::string, BufferRef>& registered = member.buffers();
  for (const auto& [name, p] : host) {
    if (registered.count(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(Who(o), ": no registered buffer is named ", name));
    }
    if (p == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(Who(o), ": the host copy of ", name, " is null"));
    }
  }
  const MappedSide& side = member.rank_layout();
  HostBuffers ptrs(side.layout.buffers.size(), nullptr);
  for (int32_t b = side.rank_begin[o.rank]; b < side.rank_begin[o.rank + 1]; ++b) {
    const std::string& name = side.layout.buffers[b].name;
    auto h = host.find(name);
    if (h != host.end()) {
      ptrs[b] = reinterpret_cast<uint8_t*>(h->second);
      continue;
    }
    if (o.device != "cpu") {
      return absl::InvalidArgumentError(
          absl::StrCat(Who(o), ": buffer ", name, " is in ", o.device,
                       " memory; give a host copy of it"));
    }
    ptrs[b] = reinterpret_cast<uint8_t*>(registered.at(name).data);
  }
  return ptrs;
}

}  // namespace

absl::Status FillMemberPattern(const Member& member, int64_t version,
                               const std::map<std::string, char*>& host) {
  return FillMemberDelta(member, version, version, 0, host);
}

absl::Status CheckMemberPattern(const Member& member, int64_t version,
                                const std::map<std::string, char*>& host) {
  return CheckMemberDelta(member, version, version, 0, host);
}

absl::Status FillMemberDelta(const Member& member, int64_t base, int64_t version,
                             int64_t changed_every, const std::map<std::string, char*>& host) {
  REFIT_ASSIGN_OR_RETURN(HostBuffers ptrs, PatternBuffers(member, host));
  PatternOptions po{member.options().rank, static_cast<uint64_t>(version)};
  po.changed_every = changed_every;
  po.base_seed = static_cast<uint64_t>(base);
  FillPattern(member.rank_layout().layout, ptrs, po);
  return absl::OkStatus();
}

absl::Status CheckMemberDelta(const Member& member, int64_t base, int64_t version,
                              int64_t changed_every, const std::map<std::string, char*>& host) {
  REFIT_ASSIGN_OR_RETURN(HostBuffers ptrs, PatternBuffers(member, host));
  // The trainer holds the model's own dtypes (its checkpoint's); an engine
  // tensor in another dtype (FP8, f32 -exp) is expected converted.
  REFIT_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(member.options().model));
  REFIT_ASSIGN_OR_RETURN(ModelTensors model, BuildModelTensors(config));
  std::map<std::string, DType> source;
  for (const TensorSpec& t : model.tensors) source[t.name] = t.dtype;
  PatternOptions po{member.options().rank, static_cast<uint64_t>(version)};
  po.changed_every = changed_every;
  po.base_seed = static_cast<uint64_t>(base);
  po.source_dtypes = &source;
  return AnnotateStatus(CheckPattern(member.rank_layout().layout, ptrs, po),
                        Who(member.options()));
}

}  // namespace refit::testing
