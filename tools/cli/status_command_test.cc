#include "tools/cli/status_command.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace refit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::StatusResponse Sample() {
  v1::StatusResponse r;
  r.set_protocol_version(1);
  r.set_epoch(3);
  r.set_plan_fingerprint("abc123");
  r.set_pull_pairs(6);
  r.set_network_pairs(2);
  auto* m = r.add_members();
  m->set_member_id("engine/e0/0");
  m->mutable_identity()->set_side(v1::SIDE_ENGINE);
  m->mutable_identity()->set_engine_id("e0");
  m->mutable_identity()->set_world_size(1);
  m->mutable_identity()->set_device("cuda:0");
  m->mutable_identity()->set_device_uuid("GPU-0000aaaa");
  m->mutable_identity()->set_transport(v1::TRANSPORT_IPC);
  auto* e0 = r.add_engines();
  e0->set_engine_id("e0");
  e0->set_committed_version(4);
  e0->set_torn_version(5);
  auto* e1 = r.add_engines();
  e1->set_engine_id("e1");
  for (int v = 1; v <= 5; ++v) {
    auto* s = r.add_rounds();
    s->set_version(v);
    s->set_outcome(v == 5 ? "aborted" : "committed");
    if (v == 5) s->set_reason("member trainer rank 1: its stream dropped");
  }
  return r;
}

TEST(StatusCommandTest, TextNamesTornEnginesAndTheProtocol) {
  const std::string text = FormatStatusText(Sample(), 2);
  EXPECT_THAT(text, HasSubstr("refit protocol: 1\n"));
  EXPECT_THAT(text, HasSubstr("engine/e0/0  engine job="));
  EXPECT_THAT(text, Not(HasSubstr("SIDE_")));
  EXPECT_THAT(text, HasSubstr("device=cuda:0 transport=ipc"));
  EXPECT_THAT(text, HasSubstr("engine e0: version 4 committed; TORN by aborted round 5"));
  EXPECT_THAT(text, HasSubstr("engine e1: no version committed\n"));
  EXPECT_THAT(text, HasSubstr("rounds (last 2 of 5)"));
  EXPECT_THAT(text, HasSubstr("pairs (trainer, engine): 6 on the pull path (same host), 2 on "
                              "the network transport"));
  EXPECT_THAT(text, HasSubstr("its stream dropped"));
  EXPECT_THAT(text, Not(HasSubstr("       3  committed")));
}

TEST(StatusCommandTest, JsonCarriesTheSameFields) {
  nlohmann::json j = nlohmann::json::parse(FormatStatusJson(Sample(), 10));
  EXPECT_EQ(j["protocol_version"], 1);
  EXPECT_EQ(j["members"][0]["side"], "engine");
  EXPECT_EQ(j["members"][0]["transport"], "ipc");
  EXPECT_EQ(j["members"][0]["device_uuid"], "GPU-0000aaaa");
  EXPECT_EQ(j["pairs"]["pull"], 6);
  EXPECT_EQ(j["pairs"]["network"], 2);
  ASSERT_EQ(j["engines"].size(), 2u);
  EXPECT_EQ(j["engines"][0]["engine_id"], "e0");
  EXPECT_EQ(j["engines"][0]["committed_version"], 4);
  EXPECT_EQ(j["engines"][0]["torn_version"], 5);
  EXPECT_EQ(j["engines"][1]["torn_version"], 0);
  EXPECT_EQ(j["rounds"].size(), 5u);
}

}  // namespace
}  // namespace refit
