// Delta rounds and the colocated pull path: refused by name when planning.
#include "server/delta_transports.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/registration.h"

namespace refit {
namespace {

// Trainer ranks 0 and 1, engine A's ranks 0 and 1, on NCCL.
PlanInput TwoAndTwo() {
  PlanInput in;
  for (v1::Side side : {v1::SIDE_TRAINER, v1::SIDE_ENGINE}) {
    for (int rank = 0; rank < 2; ++rank) {
      v1::Registration r;
      r.mutable_identity()->set_side(side);
      r.mutable_identity()->set_engine_id(side == v1::SIDE_ENGINE ? "A" : "");
      r.mutable_identity()->set_rank(rank);
      r.mutable_identity()->set_transport(v1::TRANSPORT_NCCL);
      (side == v1::SIDE_TRAINER ? in.trainer : in.engine).push_back(r);
    }
  }
  return in;
}

TEST(DeltaTransportsTest, APullMemberIsRefusedByNameWithWhatToDo) {
  PlanInput in = TwoAndTwo();
  EXPECT_TRUE(CheckDeltaTransports(in).ok());

  in.engine[1].mutable_identity()->set_transport(v1::TRANSPORT_PULL);
  absl::Status s = CheckDeltaTransports(in);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), DescribeMember(in.engine[1].identity()))) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--delta")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "pull")) << s;
  // And why: one device copy a piece costs less than reading two versions.
  EXPECT_TRUE(absl::StrContains(s.message(), "cheaper than comparing two versions")) << s;
}

}  // namespace
}  // namespace refit
