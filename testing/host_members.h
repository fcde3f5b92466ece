// Members of a test job on host memory: each joins refitd with buffers that
// it allocates itself (as ExpectedBuffers lists them, every byte 0xEE), for
// tests that run rounds through the client library and the host data plane.
#ifndef REFIT_TESTING_HOST_MEMBERS_H_
#define REFIT_TESTING_HOST_MEMBERS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/member.h"

namespace refit::testing {

// One member and the host memory behind its buffers.
struct HostMember {
  MemberOptions options;
  std::map<std::string, std::vector<char>> memory;
  std::unique_ptr<Member> member;
};

// A trainer (megatron:tp=1) and one engine (vllm:tp=1, engine id "A") of
// `model`, for refitd at `target`; not joined yet.
std::vector<HostMember> TrainerAndEngine(const std::string& target, const std::string& model);

// Joins every member with its own host buffers and the data plane
// `data_plane(i)`. Returns the first failure, naming the member's index
// (ExpectedBuffers' or Member::Join's error).
absl::Status JoinHostMembers(std::vector<HostMember>& members,
                             const std::function<DataPlaneOptions(size_t)>& data_plane,
                             absl::Time deadline);

}  // namespace refit::testing

#endif  // REFIT_TESTING_HOST_MEMBERS_H_
