// Host-memory test members (see host_members.h).
#include "testing/host_members.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace refit::testing {

std::vector<HostMember> TrainerAndEngine(const std::string& target, const std::string& model) {
  std::vector<HostMember> members(2);
  for (int i = 0; i < 2; ++i) {
    MemberOptions& o = members[i].options;
    o.connection.target = target;
    o.model = model;
    o.side = i == 0 ? Side::kTrainer : Side::kEngine;
    o.convention = i == 0 ? "megatron:tp=1" : "vllm:tp=1";
    if (i == 1) o.engine_id = "A";
  }
  return members;
}

absl::Status JoinHostMembers(std::vector<HostMember>& members,
                             const std::function<DataPlaneOptions(size_t)>& data_plane,
                             absl::Time deadline) {
  for (size_t i = 0; i < members.size(); ++i) {
    HostMember& n = members[i];
    const std::string who = absl::StrCat("member ", i);
    REFIT_ASSIGN_OR_RETURN(std::vector<LocalBuffer> want,
                           AnnotateStatus(ExpectedBuffers(n.options), who));
    std::map<std::string, BufferRef> refs;
    for (const LocalBuffer& b : want) {
      std::vector<char>& m = n.memory[b.name];
      m.assign(b.byte_size, static_cast<char>(0xEE));
      refs[b.name] = BufferRef{m.data(), b.byte_size};
    }
    REFIT_ASSIGN_OR_RETURN(
        n.member,
        AnnotateStatus(Member::Join(n.options, std::move(refs), data_plane(i), deadline), who));
  }
  return absl::OkStatus();
}

}  // namespace refit::testing
