// Tests of NamePeers (the member name after each peer rank, nothing else
// changed) and RoundFailureOfPeer (a lost peer aborts the round).
#include "exec/transport/peer_names.h"

#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

const std::vector<std::string> kNames = {"trainer rank 0", "trainer rank 1", "engine A rank 0",
                                         "engine B rank 0", "", "engine B rank 1"};

TEST(PeerNamesTest, NamesEachPeerRankKeepingCodeAndPayload) {
  absl::Status s = absl::UnavailableError(
      "rank 2 lane 1: receive from peer rank 3 failed (peer gone?); peer rank 5 too");
  s.SetPayload("refit/x", absl::Cord("p"));
  const absl::Status r = NamePeers(s, kNames);
  EXPECT_EQ(r.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r.message(),
            "rank 2 lane 1: receive from peer rank 3 (engine B rank 0) failed (peer gone?); "
            "peer rank 5 (engine B rank 1) too");
  ASSERT_TRUE(r.GetPayload("refit/x").has_value());
  EXPECT_EQ(*r.GetPayload("refit/x"), "p");
}

TEST(PeerNamesTest, UnknownRanksAndOtherMessagesStayAsTheyAre) {
  const absl::Status far = absl::DeadlineExceededError("send to peer rank 17 did not complete");
  EXPECT_EQ(NamePeers(far, kNames), far);
  const absl::Status unnamed = absl::DeadlineExceededError("send to peer rank 4 timed out");
  EXPECT_EQ(NamePeers(unnamed, kNames), unnamed);
  const absl::Status longer = absl::UnavailableError("peer rank 33 gone");
  EXPECT_EQ(NamePeers(longer, kNames), longer);  // 33 is not rank 3
  const absl::Status none = absl::InternalError("no peer here");
  EXPECT_EQ(NamePeers(none, kNames), none);
  EXPECT_TRUE(NamePeers(absl::OkStatus(), kNames).ok());
  EXPECT_EQ(NamePeers(far, {}), far);
}

TEST(PeerNamesTest, MemberNamesFollowTheEngines) {
  EXPECT_EQ(MemberNames(6, {"A", "B"}, {2, 3}),
            (std::vector<std::string>{"trainer rank 0", "trainer rank 1", "engine A rank 0",
                                      "engine B rank 0", "engine B rank 1", "engine B rank 2"}));
  EXPECT_TRUE(MemberNames(6, {}, {}).empty());
  // Only the engines a member exchanges with are listed, with their sizes:
  // ranks of others stay unnamed rather than take a listed engine's name.
  EXPECT_EQ(MemberNames(7, {"A", "C"}, {2, 5}, {1, 2}),
            (std::vector<std::string>{"trainer rank 0", "trainer rank 1", "engine A rank 0", "",
                                      "", "engine C rank 0", "engine C rank 1"}));
  EXPECT_TRUE(MemberNames(6, {"A", "B"}, {2, 3}, {1}).empty());
  EXPECT_TRUE(MemberNames(6, {"A"}, {2, 3}).empty());
}

TEST(PeerNamesTest, APeerLostMidRoundAbortsTheRoundKeepingMessageAndPayload) {
  absl::Status lost = absl::UnavailableError(
      "rank 2 lane 1: receive from peer rank 3 (engine B rank 0) failed (peer gone?)");
  lost.SetPayload("refit/x", absl::Cord("p"));
  const absl::Status r = RoundFailureOfPeer(lost);
  EXPECT_EQ(r.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(r.message(), lost.message());
  ASSERT_TRUE(r.GetPayload("refit/x").has_value());
  EXPECT_EQ(*r.GetPayload("refit/x"), "p");
  for (const absl::Status& same :
       {absl::OkStatus(), absl::DeadlineExceededError("send to peer rank 4 timed out"),
        absl::CancelledError("round 3 aborted"), absl::InvalidArgumentError("bad plan")}) {
    EXPECT_EQ(RoundFailureOfPeer(same), same);
  }
}

}  // namespace
}  // namespace refit
