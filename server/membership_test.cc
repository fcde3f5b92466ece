// Membership: admission rules, epochs, heartbeats, the complete membership.
#include "server/membership.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

v1::Registration Reg(v1::Side side, const std::string& engine, int rank, int world,
                     const std::string& job = "job") {
  v1::Registration r;
  auto* id = r.mutable_identity();
  id->set_job(job);
  id->set_side(side);
  id->set_engine_id(engine);
  id->set_rank(rank);
  id->set_world_size(world);
  return r;
}

const absl::Time t0 = absl::UnixEpoch() + absl::Hours(1);

TEST(MembershipTest, RegistrationBytesAreBoundedInAll) {
  v1::Registration a = Reg(v1::SIDE_TRAINER, "", 0, 2), b = Reg(v1::SIDE_TRAINER, "", 1, 2);
  a.set_model_config(std::string(600, 'a'));
  b.set_model_config(std::string(600, 'b'));
  Membership m(1, 1000);
  ASSERT_TRUE(m.Admit(a, t0).ok());
  const absl::StatusOr<Membership::Admitted> over = m.Admit(b, t0);
  EXPECT_TRUE(absl::IsResourceExhausted(over.status())) << over.status();
  EXPECT_NE(over.status().message().find("--max_registration_mib"), std::string::npos);
  // Replacing a member counts its new registration instead of the old one.
  a.set_model_config(std::string(900, 'a'));
  EXPECT_TRUE(m.Admit(a, t0).ok());
  EXPECT_TRUE(m.Remove("trainer/job/0"));
  EXPECT_EQ(m.bytes(), 0);
  EXPECT_TRUE(m.Admit(b, t0).ok());
}

TEST(MembershipTest, AdmitsNewSameAndReplacedMembersAndCountsEpochs) {
  Membership m(1);
  EXPECT_EQ(m.epoch(), 0);
  EXPECT_EQ(*m.Admit(Reg(v1::SIDE_TRAINER, "", 0, 1), t0), Membership::Admitted::kNew);
  EXPECT_EQ(m.epoch(), 1);
  EXPECT_EQ(*m.Admit(Reg(v1::SIDE_TRAINER, "", 0, 1), t0 + absl::Seconds(1)),
            Membership::Admitted::kSame);
  EXPECT_EQ(m.epoch(), 1);
  EXPECT_EQ(m.Find("trainer/job/0")->last_heartbeat, t0 + absl::Seconds(1));
  v1::Registration other = Reg(v1::SIDE_TRAINER, "", 0, 1);
  other.set_model_config("another");
  EXPECT_EQ(*m.Admit(other, t0), Membership::Admitted::kReplaced);
  EXPECT_EQ(m.epoch(), 2);
  EXPECT_EQ(m.Find("trainer/job/0")->reg.model_config(), "another");
  EXPECT_TRUE(m.Remove("trainer/job/0"));
  EXPECT_FALSE(m.Remove("trainer/job/0"));
  EXPECT_EQ(m.epoch(), 3);
}

TEST(MembershipTest, RefusesAnotherJobAndADisagreeingWorldSize) {
  Membership m(1);
  ASSERT_TRUE(m.Admit(Reg(v1::SIDE_ENGINE, "A", 0, 2), t0).ok());
  auto s = m.Admit(Reg(v1::SIDE_ENGINE, "A", 1, 3), t0);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("identity.world_size"), absl::string_view::npos);
  s = m.Admit(Reg(v1::SIDE_ENGINE, "B", 0, 1, "other"), t0);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("identity.job"), absl::string_view::npos);
  EXPECT_TRUE(m.Admit(Reg(v1::SIDE_ENGINE, "B", 0, 3), t0).ok());  // other replica
  EXPECT_EQ(m.epoch(), 2);
}

TEST(MembershipTest, AWorldSizeBindsItsReplicaWhileAMemberHoldsIt) {
  Membership m(1);
  // The only member of its replica may re-register with another size.
  ASSERT_TRUE(m.Admit(Reg(v1::SIDE_ENGINE, "A", 0, 2), t0).ok());
  ASSERT_TRUE(m.Admit(Reg(v1::SIDE_ENGINE, "A", 0, 4), t0).ok());
  ASSERT_TRUE(m.Admit(Reg(v1::SIDE_ENGINE, "A", 1, 4), t0).ok());
  auto s = m.Admit(Reg(v1::SIDE_ENGINE, "A", 2, 2), t0);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("disagrees with 4"), absl::string_view::npos)
      << s.status();
  // Rank 0 re-registering with size 2 disagrees with rank 1's 4.
  EXPECT_FALSE(m.Admit(Reg(v1::SIDE_ENGINE, "A", 0, 2), t0).ok());
  // Once every member of size 4 left, the replica takes another size.
  ASSERT_TRUE(m.Remove("engine/job/A/0"));
  ASSERT_TRUE(m.Remove("engine/job/A/1"));
  EXPECT_TRUE(m.Admit(Reg(v1::SIDE_ENGINE, "A", 2, 2), t0).ok());
  // The trainer's size is apart from any engine's.
  EXPECT_TRUE(m.Admit(Reg(v1::SIDE_TRAINER, "", 0, 8), t0).ok());
  // Another job is refused while one member of this one is there.
  EXPECT_TRUE(m.Remove("trainer/job/0"));
  EXPECT_EQ(m.Admit(Reg(v1::SIDE_ENGINE, "A", 0, 2, "next"), t0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(m.Remove("engine/job/A/2"));
  EXPECT_TRUE(m.Admit(Reg(v1::SIDE_ENGINE, "A", 0, 2, "next"), t0).ok());
}

TEST(MembershipTest, TouchAndExpiry) {
  Membership m(1);
  ASSERT_TRUE(m.Admit(Reg(v1::SIDE_TRAINER, "", 0, 2), t0).ok());
  ASSERT_TRUE(m.Admit(Reg(v1::SIDE_TRAINER, "", 1, 2), t0).ok());
  EXPECT_TRUE(m.Touch("trainer/job/1", t0 + absl::Seconds(5)));
  EXPECT_FALSE(m.Touch("trainer/job/9", t0));
  EXPECT_TRUE(m.Expired(t0 + absl::Seconds(10), absl::Seconds(10)).empty());
  EXPECT_EQ(m.Expired(t0 + absl::Seconds(11), absl::Seconds(10)),
            std::vector<std::string>{"trainer/job/0"});
}

TEST(MembershipTest, CompleteMembershipIsInPlanOrder) {
  Membership m(1);
  ASSERT_TRUE(m.Admit(Reg(v1::SIDE_ENGINE, "B", 1, 2), t0).ok());
  ASSERT_TRUE(m.Admit(Reg(v1::SIDE_TRAINER, "", 1, 2), t0).ok());
  EXPECT_FALSE(m.Complete().has_value());  // trainer incomplete
  ASSERT_TRUE(m.Admit(Reg(v1::SIDE_TRAINER, "", 0, 2), t0).ok());
  EXPECT_FALSE(m.Complete().has_value());  // no complete engine
  ASSERT_TRUE(m.Admit(Reg(v1::SIDE_ENGINE, "B", 0, 2), t0).ok());
  ASSERT_TRUE(m.Admit(Reg(v1::SIDE_ENGINE, "A", 0, 2), t0).ok());  // A incomplete
  std::optional<PlanInput> in = m.Complete();
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(in->epoch, m.epoch());
  EXPECT_EQ(in->ids, (std::vector<std::string>{"trainer/job/0", "trainer/job/1",
                                               "engine/job/B/0", "engine/job/B/1"}));
  ASSERT_EQ(in->trainer.size(), 2u);
  EXPECT_EQ(in->trainer[1].identity().rank(), 1);
  ASSERT_EQ(in->engine.size(), 2u);
  EXPECT_EQ(in->fingerprint.size(), 16u);
  ASSERT_TRUE(m.Admit(Reg(v1::SIDE_ENGINE, "A", 1, 2), t0).ok());
  std::optional<PlanInput> both = m.Complete();
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->ids[2], "engine/job/A/0");  // engines by id
  EXPECT_NE(both->fingerprint, in->fingerprint);
  Membership two(2);
  for (auto r : {Reg(v1::SIDE_TRAINER, "", 0, 1), Reg(v1::SIDE_ENGINE, "A", 0, 1)}) {
    ASSERT_TRUE(two.Admit(r, t0).ok());
  }
  EXPECT_FALSE(two.Complete().has_value());  // min_engines = 2
}

}  // namespace
}  // namespace refit
