// H2ClientFrames: the bounds on what a client sends after the gate.
#include "server/h2_client_frames.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/h2_test_frames.h"

namespace refit {
namespace {

using ::refit::h2_test::Frame;
using ::refit::h2_test::kPreface;

const std::string& Feed(H2ClientFrames& f, const std::string& s, absl::Time now) {
  return f.Consume(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size()),
                   now);
}

const absl::Time kStart = absl::FromUnixSeconds(1000);

TEST(H2ClientFramesTest, HonestCallsPassByteByByte) {
  H2ClientFrames f(H2ClientLimits(), kStart);
  std::string bytes = std::string(kPreface) + Frame(4, 0, 0, "");
  for (uint32_t stream = 1; stream < 400; stream += 2) {
    bytes += Frame(1, 4, stream, std::string(300, 'h')) + Frame(0, 1, stream, "12345");
  }
  for (char c : bytes) ASSERT_EQ(Feed(f, std::string(1, c), kStart), "");
  EXPECT_EQ(f.last_stream(), 399u);
  EXPECT_EQ(f.CheckStall(kStart + absl::Hours(1)), "");  // idle between frames is fine
}

TEST(H2ClientFramesTest, AContinuationFloodEndsAtTheHeaderBlockLimit) {
  H2ClientFrames f(H2ClientLimits(), kStart);
  ASSERT_EQ(Feed(f, std::string(kPreface) + Frame(1, 4, 1, "first") + Frame(1, 0, 3, "x"),
                 kStart),
            "");
  int frames = 0;
  std::string reason;
  while (reason.empty() && frames < 1000) {
    reason = Feed(f, Frame(9, 0, 3, std::string(1000, 'c')), kStart);
    ++frames;
  }
  EXPECT_TRUE(absl::StrContains(reason, "header block of more than 65536")) << reason;
  EXPECT_EQ(frames, 65);  // 9 + 1 + 65 x 1009 > 64 KiB
  // Empty CONTINUATION frames count their headers.
  H2ClientFrames g(H2ClientLimits(), kStart);
  Feed(g, std::string(kPreface) + Frame(1, 0, 1, ""), kStart);
  std::string empty;
  for (int i = 0; i < 8000; ++i) empty += Frame(9, 0, 1, "");
  EXPECT_FALSE(Feed(g, empty, kStart).empty());
}

TEST(H2ClientFramesTest, RapidResetEndsTheConnectionLateCancelsDoNot) {
  H2ClientLimits limits;
  limits.burst = 100;
  limits.per_second = 10;
  H2ClientFrames f(limits, kStart);
  Feed(f, kPreface, kStart);
  // Calls cancelled two seconds after they opened (deadlines) are not counted.
  for (uint32_t s = 1; s < 2000; s += 2) ASSERT_EQ(Feed(f, Frame(1, 4, s, "h"), kStart), "");
  for (uint32_t s = 1; s < 2000; s += 2) {
    ASSERT_EQ(Feed(f, Frame(3, 0, s, "\0\0\0\x08"), kStart + absl::Seconds(2)), "");
  }
  // Opened and reset at once: the 101st ends it.
  std::string reason;
  int pairs = 0;
  for (uint32_t s = 2001; reason.empty() && pairs < 1000; s += 2, ++pairs) {
    reason = Feed(f, Frame(1, 4, s, "h") + Frame(3, 0, s, "\0\0\0\x08"),
                  kStart + absl::Seconds(2));
  }
  EXPECT_EQ(pairs, 101);
  EXPECT_TRUE(absl::StrContains(reason, "resets of new streams")) << reason;
}

TEST(H2ClientFramesTest, PingsWithinTheRateAreFine) {
  H2ClientLimits limits;
  limits.burst = 10;
  limits.per_second = 5;
  H2ClientFrames f(limits, kStart);
  Feed(f, kPreface, kStart);
  for (int i = 0; i < 100; ++i) {  // one ping a second
    ASSERT_EQ(Feed(f, Frame(6, 0, 0, "12345678"), kStart + absl::Seconds(i)), "");
  }
  std::string reason;
  for (int i = 0; i < 20 && reason.empty(); ++i) {
    reason = Feed(f, Frame(6, 0, 0, "12345678"), kStart + absl::Seconds(100));
  }
  EXPECT_FALSE(reason.empty());
}

TEST(H2ClientFramesTest, AStalledFrameOrHeaderBlockEndsAfterTheTimeout) {
  H2ClientFrames f(H2ClientLimits(), kStart);
  std::string frame = Frame(0, 0, 1, std::string(100, 'd'));
  Feed(f, std::string(kPreface) + frame.substr(0, 50), kStart);
  EXPECT_EQ(f.CheckStall(kStart + absl::Seconds(9)), "");
  EXPECT_TRUE(absl::StrContains(f.CheckStall(kStart + absl::Seconds(11)), "a frame unfinished"));

  H2ClientFrames g(H2ClientLimits(), kStart);
  Feed(g, std::string(kPreface) + Frame(1, 0, 1, "x"), kStart);
  Feed(g, Frame(9, 0, 1, "y"), kStart + absl::Seconds(8));
  EXPECT_EQ(g.CheckStall(kStart + absl::Seconds(9)), "");
  EXPECT_TRUE(
      absl::StrContains(g.CheckStall(kStart + absl::Seconds(11)), "a header block unfinished"));
}

}  // namespace
}  // namespace refit
