// Delta rounds and the colocated pull path: refused by name when planning.
#include "server/delta_transports.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/registration.h"

namespace refit {
namespace {

v1::Registration Member(v1::Side side, int rank, v1::Transport transport) {
  v1::Registration r;
  v1::MemberIdentity* id = r.mutable_identity();
  id->set_job("job");
  id->set_side(side);
  id->set_engine_id(side == v1::SIDE_ENGINE ? "A" : "");
  id->set_rank(rank);
  id->set_world_size(2);
  id->set_host_id("host0");
  id->set_device_uuid("GPU-" + std::to_string(rank));
  id->set_transport(transport);
  return r;
}

TEST(DeltaTransportsTest, APullMemberIsRefusedByNameWithWhatToDo) {
  PlanInput in;
  for (int r = 0; r < 2; ++r) {
    in.trainer.push_back(Member(v1::SIDE_TRAINER, r, v1::TRANSPORT_NCCL));
    in.engine.push_back(Member(v1::SIDE_ENGINE, r, v1::TRANSPORT_NCCL));
  }
  EXPECT_TRUE(CheckDeltaTransports(in).ok());

  in.engine[1] = Member(v1::SIDE_ENGINE, 1, v1::TRANSPORT_PULL);
  absl::Status s = CheckDeltaTransports(in);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), DescribeMember(in.engine[1].identity()))) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--delta")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "pull")) << s;
}

}  // namespace
}  // namespace refit
