// Members of a test job on host memory: each joins refitd with buffers that
// it allocates itself (as ExpectedBuffers lists them, every byte 0xEE), for
// tests that run rounds through the client library and the host data plane:
// one trainer rank and one engine rank, or every rank of a trainer and of
// several engines (each member then runs its own slice of the plan), with
// RunHostRounds to take them through rounds as a job's members do.
#ifndef REFIT_TESTING_HOST_MEMBERS_H_
#define REFIT_TESTING_HOST_MEMBERS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/member.h"
#include "exec/run_stats.h"
#include "plan/plan.h"
#include "server/refit_server.h"

namespace refit::testing {

// One member and the host memory behind its buffers.
struct HostMember {
  MemberOptions options;
  std::map<std::string, std::vector<char>> memory;
  std::unique_ptr<Member> member;
};

// refitd on 127.0.0.1 (an unused port) with the production plan function
// planning with `planner`, delta rounds when `delta`, its members' host
// links at `host_link_gbps` (refitd --host_link_gbps; the default 10 MB/s
// is below the host delta codec's rate, so delta rounds run delta; 0:
// Gloo's speeds, where they run dense); fails as RefitServer::Start.
absl::StatusOr<std::unique_ptr<RefitServer>> StartHostRefitd(bool delta,
                                                            PlannerOptions planner = {},
                                                            double host_link_gbps = 0.01);

// A trainer (megatron:tp=1) and one engine (vllm:tp=1, engine id "A") of
// `model`, for refitd at `target`; not joined yet.
std::vector<HostMember> TrainerAndEngine(const std::string& target, const std::string& model);

// Every rank of the trainer `trainer` ("megatron:tp=2"), then every rank of
// each engine of `engines` ("vllm:tp=2"; engine ids "A", "B", ... in
// order), of `model`, for refitd at `target`; not joined yet.
// INVALID_ARGUMENT naming a convention that does not parse.
absl::StatusOr<std::vector<HostMember>> HostJob(const std::string& target,
                                                const std::string& model,
                                                const std::string& trainer,
                                                const std::vector<std::string>& engines);

// Joins every member with its own host buffers and the data plane
// `data_plane(i)`. Returns the first failure, naming the member's index
// (ExpectedBuffers' or Member::Join's error).
absl::Status JoinHostMembers(std::vector<HostMember>& members,
                             const std::function<DataPlaneOptions(size_t)>& data_plane,
                             absl::Time deadline);

// What RunHostRounds saw: per round (index v - 1), per member (in the
// order given) its status (an engine's check included) and its figures.
struct HostRounds {
  std::vector<std::vector<absl::Status>> status;
  std::vector<std::vector<RunStats>> stats;
  // OK when every member passed every round, else the first failure,
  // annotated with its round and member index.
  absl::Status FirstFailure() const;
};

// Takes joined `members` (the first a trainer rank) through rounds 1 ..
// `rounds` as a job's members take them, each on a thread of its own:
// every member prepares; per round v, every trainer rank writes version v
// (`fill`), all meet, the first member starts round v, every member runs
// it, every engine rank checks version v (`check`), all meet again (so no
// trainer writes version v + 1 while an engine checks v). A member that
// fails stops and leaves the meetings; the others fail by `deadline` at
// the latest (refitd aborts a round a member reported failed).
HostRounds RunHostRounds(std::vector<HostMember>& members, int64_t rounds,
                         const std::function<absl::Status(const Member&, int64_t)>& fill,
                         const std::function<absl::Status(const Member&, int64_t)>& check,
                         absl::Time deadline);

}  // namespace refit::testing

#endif  // REFIT_TESTING_HOST_MEMBERS_H_
