// MemberCredentials: binding, refusal of other secrets, the job key,
// takeover and retired secrets.
#include "server/member_credentials.h"

#include "gtest/gtest.h"

namespace refit {
namespace {

using Admission = MemberCredentials::Admission;

absl::StatusCode Code(const absl::StatusOr<Admission>& a) { return a.status().code(); }

TEST(MemberCredentialsTest, WithoutAJobKeyABoundIdentityRefusesOtherSecretsUntilUnbound) {
  MemberCredentials c("");
  EXPECT_EQ(*c.CheckRegister("t/0", "trainer rank 0", "s1", "", false, ""), Admission::kBind);
  c.Bind("t/0", "s1");
  EXPECT_EQ(*c.CheckRegister("t/0", "trainer rank 0", "s1", "", false, ""), Admission::kSame);
  absl::StatusOr<Admission> thief =
      c.CheckRegister("t/0", "trainer rank 0", "s2", "", /*live=*/true, "soon");
  EXPECT_EQ(Code(thief), absl::StatusCode::kPermissionDenied);
  // Its stream dropped: still refused, only retryable (it may expire).
  EXPECT_EQ(Code(c.CheckRegister("t/0", "trainer rank 0", "s2", "", false, "")),
            absl::StatusCode::kUnavailable);
  EXPECT_NE(thief.status().message().find("trainer rank 0 (t/0) is registered with another"),
            absl::string_view::npos);
  EXPECT_NE(thief.status().message().find("(soon)"), absl::string_view::npos);
  EXPECT_FALSE(c.Check("t/0", "trainer rank 0", "s2").ok());
  EXPECT_TRUE(c.Check("t/0", "trainer rank 0", "s1").ok());
  // The member expired: the same process comes back, or a new one binds.
  c.Unbind("t/0");
  EXPECT_EQ(*c.CheckRegister("t/0", "trainer rank 0", "s1", "", false, ""), Admission::kBind);
  EXPECT_EQ(*c.CheckRegister("t/0", "trainer rank 0", "s2", "", false, ""), Admission::kBind);
}

TEST(MemberCredentialsTest, AReplacedSecretIsRetiredForGood) {
  MemberCredentials c("");
  c.Bind("t/0", "s1");
  c.Unbind("t/0");
  c.Bind("t/0", "s2");  // a new process, after s1's member expired
  c.Unbind("t/0");      // and it expired too: s1 still cannot come back
  absl::StatusOr<Admission> replay = c.CheckRegister("t/0", "trainer rank 0", "s1", "", false, "");
  EXPECT_EQ(Code(replay), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(replay.status().message().find("replaced by a newer registration"),
            absl::string_view::npos);
  EXPECT_EQ(*c.CheckRegister("t/0", "trainer rank 0", "s2", "", false, ""), Admission::kBind);
}

TEST(MemberCredentialsTest, TheJobKeyIsRequiredAndLetsARestartedProcessTakeOver) {
  MemberCredentials c("job-key");
  for (const char* key : {"", "wrong"}) {
    absl::StatusOr<Admission> a = c.CheckRegister("t/0", "trainer rank 0", "s1", key, false, "");
    EXPECT_EQ(Code(a), absl::StatusCode::kPermissionDenied) << key;
    EXPECT_EQ(a.status().message().rfind("job_key: ", 0), 0u) << a.status();
  }
  EXPECT_EQ(*c.CheckRegister("t/0", "trainer rank 0", "s1", "job-key", true, ""), Admission::kBind);
  c.Bind("t/0", "s1");
  EXPECT_EQ(*c.CheckRegister("t/0", "trainer rank 0", "s2", "job-key", true, ""), Admission::kTakeOver);
  c.Bind("t/0", "s2");
  EXPECT_FALSE(c.Check("t/0", "trainer rank 0", "s1").ok());
  EXPECT_EQ(Code(c.CheckRegister("t/0", "trainer rank 0", "s1", "job-key", true, "")),
            absl::StatusCode::kPermissionDenied);  // the old process cannot take it back
}

TEST(MemberCredentialsTest, AnOversizedJobKeyIsRefusedNamingItWithOrWithoutAKey) {
  const std::string huge(MemberCredentials::kMaxJobKeyBytes + 1, 'k');
  for (const char* key : {"", "job-key"}) {
    MemberCredentials c(key);
    absl::StatusOr<Admission> a = c.CheckRegister("t/0", "trainer rank 0", "s1", huge, false, "");
    EXPECT_EQ(Code(a), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_EQ(a.status().message(), "job_key: 4097 bytes; at most 4096") << key;
  }
  MemberCredentials c(std::string(MemberCredentials::kMaxJobKeyBytes, 'k'));
  EXPECT_EQ(*c.CheckRegister("t/0", "trainer rank 0", "s1",
                             std::string(MemberCredentials::kMaxJobKeyBytes, 'k'), false, ""),
            Admission::kBind);
}

TEST(MemberCredentialsTest, UnboundIdentitiesAreForgottenPastTheCap) {
  MemberCredentials c("");
  for (size_t i = 0; i < MemberCredentials::kMaxIdentities + 10; ++i) {
    const std::string id = "e/" + std::to_string(i);
    c.Bind(id, "s");
    c.Unbind(id);
  }
  c.Bind("t/0", "s1");
  EXPECT_TRUE(c.IsBound("t/0"));
}

}  // namespace
}  // namespace refit
