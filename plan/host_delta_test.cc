// ChooseHostDelta: dense on links faster than the host codec, delta on
// slower ones, and the reason names both figures.
#include "plan/host_delta.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

// One trainer rank sending `bytes` to one engine rank on another host.
Plan OneMessage(int64_t bytes) {
  Plan p;
  p.src.world_size = 1;
  p.dst.world_size = 1;
  Message m;
  m.src_rank = 0;
  m.dst_rank = 0;
  m.bytes = bytes;
  p.messages.push_back(m);
  return p;
}

TEST(HostDeltaTest, AFastLinkRunsDenseWithTheReason) {
  HostDeltaModel model;  // Gloo's 1.25 GB/s between hosts, codec 0.2 GB/s
  const HostDeltaChoice c = ChooseHostDelta(OneMessage(1'000'000'000), model);
  EXPECT_FALSE(c.delta);
  EXPECT_NEAR(c.codec_seconds, 5.0, 1e-9);
  EXPECT_NEAR(c.dense_seconds, 0.8, 1e-9);
  EXPECT_TRUE(absl::StartsWith(c.reason, "delta rounds run dense")) << c.reason;
  EXPECT_TRUE(absl::StrContains(c.reason, "0.20 GB/s")) << c.reason;
  EXPECT_TRUE(absl::StrContains(c.reason, "0.800 s")) << c.reason;
}

TEST(HostDeltaTest, ASlowLinkKeepsDelta) {
  HostDeltaModel model;
  model.links.intra_host_gbps = model.links.inter_host_gbps = 0.05;  // 400 Mb/s
  const HostDeltaChoice c = ChooseHostDelta(OneMessage(1'000'000'000), model);
  EXPECT_TRUE(c.delta);
  EXPECT_NEAR(c.dense_seconds, 20.0, 1e-9);
  EXPECT_TRUE(absl::StartsWith(c.reason, "delta rounds run:")) << c.reason;
}

TEST(HostDeltaTest, TheBusiestRankDecides) {
  // Two engine ranks fed by one trainer rank: the trainer's codec handles
  // both messages, each engine's link one.
  Plan p = OneMessage(500'000'000);
  p.dst.world_size = 2;
  Message m = p.messages[0];
  m.dst_rank = 1;
  p.messages.push_back(m);
  HostDeltaModel model;
  model.codec_gbps = 1.0;
  model.links.intra_host_gbps = model.links.inter_host_gbps = 0.6;
  const HostDeltaChoice c = ChooseHostDelta(p, model);
  EXPECT_NEAR(c.codec_seconds, 1.0, 1e-9);            // the trainer's 1 GB
  EXPECT_NEAR(c.dense_seconds, 1.0 / 0.6, 1e-9);      // its 1 GB sent at 0.6 GB/s
  EXPECT_TRUE(c.delta);
  EXPECT_TRUE(ChooseHostDelta(Plan(), model).delta);  // nothing to move
}

TEST(HostDeltaTest, FlagsNameTheWrongOne) {
  auto gloo = HostDeltaFromFlags(0, 0.2);
  ASSERT_TRUE(gloo.ok());
  EXPECT_EQ(gloo->links.inter_host_gbps, GlooLinkSpeeds().inter_host_gbps);
  auto slow = HostDeltaFromFlags(0.01, 0.5);
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(slow->links.intra_host_gbps, 0.01);
  EXPECT_EQ(slow->codec_gbps, 0.5);
  EXPECT_TRUE(absl::StrContains(HostDeltaFromFlags(-1, 0.2).status().message(),
                                "--host_link_gbps"));
  EXPECT_TRUE(absl::StrContains(HostDeltaFromFlags(0, 0).status().message(),
                                "--host_codec_gbps"));
}

}  // namespace
}  // namespace refit
