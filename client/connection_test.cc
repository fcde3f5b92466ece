// What a member meets connecting and disconnecting, through the C ABI and
// the C++ RefitClient: a token file's newline is stripped and a token byte
// a gRPC header cannot carry is refused (never crashing the process, never
// printed); a malformed address is refused at once and a refused connection
// is named; close() leaves the membership, so the same program can run
// again at once; a call that refitd's shutdown ends says so, and every
// call, start_round included, fails fast once refitd is gone.
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/c_api.h"
#include "client/refit_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/default_plan.h"
#include "server/refit_server.h"

namespace refit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using nlohmann::json;

constexpr int kInvalidArgument = 3;
constexpr int kUnavailable = 14;
constexpr char kToken[] = "s3cret-token";

// Host memory for every buffer of a Megatron TP1 trainer rank 0 of tiny-qwen3.
struct Trainer {
  std::vector<std::string> names;
  std::vector<std::vector<char>> storage;
  std::vector<const char*> c_names;
  std::vector<void*> ptrs;
  std::vector<int64_t> sizes;

  Trainer() {
    char* out = nullptr;
    EXPECT_EQ(refit_expected_buffers(Options("").c_str(), &out), 0) << refit_last_error();
    if (out == nullptr) return;
    for (const json& e : json::parse(out)) {
      names.push_back(e["name"].get<std::string>());
      storage.emplace_back(e["bytes"].get<int64_t>(), 0);
    }
    refit_free(out);
    for (size_t i = 0; i < names.size(); ++i) {
      c_names.push_back(names[i].c_str());
      ptrs.push_back(storage[i].data());
      sizes.push_back(static_cast<int64_t>(storage[i].size()));
    }
  }

  static std::string Options(const std::string& extra) {
    return absl::StrCat(
        "{\"side\": \"trainer\", \"rank\": 0, \"model\": \"tiny-qwen3\", "
        "\"convention\": \"megatron:tp=1\", \"heartbeat_ms\": 200",
        extra, "}");
  }

  // refit_member_join with `extra` options (JSON members after a comma).
  int Join(const std::string& extra, double timeout_s, refit_member** m) {
    return refit_member_join(Options(extra).c_str(), static_cast<int32_t>(names.size()),
                             c_names.data(), ptrs.data(), sizes.data(), timeout_s, m);
  }
};

std::unique_ptr<RefitServer> StartRefitd(const std::string& token) {
  RefitServer::Options so;
  so.coordinator.plan_function = DefaultPlanFunction();
  so.bearer_token = token;
  auto server = RefitServer::Start(std::move(so));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

std::string Server(const RefitServer& s) {
  return absl::StrCat(", \"server\": \"127.0.0.1:", s.port(), "\"");
}

// JSON string escapes for the token bytes the tests send.
std::string Token(const std::string& json_text) {
  return absl::StrCat(", \"token\": \"", json_text, "\"");
}

TEST(CApiConnection, TokenNewlineIsStrippedAndBadBytesAreRefusedUnprinted) {
  std::unique_ptr<RefitServer> server = StartRefitd(kToken);
  ASSERT_NE(server, nullptr);
  Trainer t;
  refit_member* m = nullptr;
  // As read from a token file: the newline goes, as refitd strips its own.
  ASSERT_EQ(t.Join(Server(*server) + Token("  s3cret-token\\n"), 10, &m), 0)
      << refit_last_error();
  refit_member_close(m);
  m = nullptr;
  for (const char* bad : {"s3cret\\ntoken", "s3cret\\u0001token", "s3cr\\u00e9t"}) {
    const absl::Time t0 = absl::Now();
    EXPECT_EQ(t.Join(Server(*server) + Token(bad), 10, &m), kInvalidArgument) << bad;
    EXPECT_LT(absl::Now() - t0, absl::Milliseconds(500)) << bad;
    const std::string err = refit_last_error();
    EXPECT_THAT(err, HasSubstr("token: byte ")) << bad;
    EXPECT_THAT(err, Not(HasSubstr("s3c"))) << err;
    EXPECT_EQ(m, nullptr);
  }
}

TEST(CApiConnection, MalformedAddressIsRefusedAtOnce) {
  Trainer t;
  for (const char* bad : {"127.0.0.1", "http://127.0.0.1:50051", "127.0.0.1:http",
                          "127.0.0.1:70000", "", "[::1]", "dns:///127.0.0.1"}) {
    refit_member* m = nullptr;
    const absl::Time t0 = absl::Now();
    EXPECT_EQ(t.Join(absl::StrCat(", \"server\": \"", bad, "\""), 30, &m), kInvalidArgument)
        << bad;
    EXPECT_LT(absl::Now() - t0, absl::Milliseconds(500)) << bad;
    EXPECT_THAT(refit_last_error(), HasSubstr(absl::StrCat("server")));
    if (*bad != '\0') EXPECT_THAT(refit_last_error(), HasSubstr(bad));
  }
  refit_member* m = nullptr;
  EXPECT_EQ(t.Join(", \"server\": \"http://127.0.0.1:50051\"", 30, &m), kInvalidArgument);
  EXPECT_THAT(refit_last_error(), HasSubstr("use \"127.0.0.1:50051\""));
}

TEST(CApiConnection, RefusedConnectionIsNamed) {
  Trainer t;
  refit_member* m = nullptr;
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(t.Join(", \"server\": \"127.0.0.1:1\"", 1.0, &m), kUnavailable);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
  EXPECT_THAT(refit_last_error(), HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(refit_last_error(), HasSubstr("connection refused"));
}

TEST(CApiConnection, EveryCallFailsFastOnceRefitdIsGone) {
  // A member waits 2 s (its connect timeout) for refitd, not its whole
  // timeout.
  Trainer t;
  refit_member* m = nullptr;
  absl::Time t0 = absl::Now();
  EXPECT_EQ(t.Join(", \"server\": \"127.0.0.1:1\"", 60, &m), kUnavailable);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(4));
  EXPECT_THAT(refit_last_error(), HasSubstr("127.0.0.1:1"));

  std::unique_ptr<RefitServer> server = StartRefitd("");
  ASSERT_NE(server, nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", server->port());
  ASSERT_EQ(t.Join(Server(*server), 10, &m), 0) << refit_last_error();
  server->Shutdown();
  server.reset();
  // start_round retries refitd's own UNAVAILABLE (a plan being built) but
  // not a refitd that is gone: UNAVAILABLE naming it within ~2 s, as every
  // other call, instead of DEADLINE_EXCEEDED at its 60 s.
  t0 = absl::Now();
  EXPECT_EQ(refit_member_start_round(m, 1, 60), kUnavailable);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(4));
  EXPECT_THAT(refit_last_error(), HasSubstr(absl::StrCat("refitd at ", address)));
  int64_t v = 0;
  t0 = absl::Now();
  EXPECT_EQ(refit_member_start_next_round(m, 60, &v), kUnavailable);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(4));
  EXPECT_THAT(refit_last_error(), HasSubstr(address));
  t0 = absl::Now();
  EXPECT_EQ(refit_member_wait_for_round(m, 60, &v), kUnavailable);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(4));
  refit_member_close(m);
}

// refitd's member list, through a client of its own.
int Members(const RefitServer& s) {
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", s.port());
  auto c = RefitClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return -1;
  auto st = (*c)->GetStatus(absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(st.ok()) << st.status();
  return st.ok() ? st->members_size() : -1;
}

TEST(CApiConnection, CloseLeavesTheMembership) {
  std::unique_ptr<RefitServer> server = StartRefitd("");
  ASSERT_NE(server, nullptr);
  Trainer t;
  refit_member* m = nullptr;
  ASSERT_EQ(t.Join(Server(*server), 10, &m), 0) << refit_last_error();
  EXPECT_EQ(Members(*server), 1);
  const absl::Time t0 = absl::Now();
  refit_member_close(m);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  EXPECT_EQ(Members(*server), 0);  // not at the heartbeat timeout (10 s)

  // Left explicitly, then closed: one leave, no error.
  ASSERT_EQ(t.Join(Server(*server), 10, &m), 0) << refit_last_error();
  ASSERT_EQ(refit_member_leave(m, 10), 0) << refit_last_error();
  EXPECT_EQ(Members(*server), 0);
  refit_member_close(m);
}

TEST(CApiConnection, ShutdownEndsCallsWithAReason) {
  std::unique_ptr<RefitServer> server = StartRefitd("");
  ASSERT_NE(server, nullptr);
  Trainer t;
  refit_member* m = nullptr;
  ASSERT_EQ(t.Join(Server(*server), 10, &m), 0) << refit_last_error();
  // A wait in refitd (a key nobody sets) when it shuts down.
  int code = -1;
  std::string err;
  std::thread waiter([&] {
    char* value = nullptr;
    code = refit_member_kv_get(m, "never-set", 30, &value);
    err = refit_last_error();
  });
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time t0 = absl::Now();
  server->Shutdown();
  waiter.join();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  EXPECT_EQ(code, kUnavailable) << err;
  EXPECT_THAT(err, HasSubstr("shutting down"));
  EXPECT_THAT(err, Not(HasSubstr("CANCELLED")));
  // The next call, refitd gone: refused, and said so.
  EXPECT_EQ(refit_member_kv_set(m, "k", "v", 5), kUnavailable);
  EXPECT_THAT(refit_last_error(), HasSubstr("refitd at 127.0.0.1:"));
  refit_member_close(m);
}

TEST(RefitClientConnection, TokenAndTargetAreCheckedBeforeConnecting) {
  RefitClient::Options o;
  o.target = "127.0.0.1:1";
  o.bearer_token = "\tabc\r\n";
  std::string sent;
  ASSERT_TRUE(RefitClient::CheckOptions(o, &sent).ok());
  EXPECT_EQ(sent, "abc");
  o.bearer_token = "abc\r\nx-injected: 1";
  absl::StatusOr<std::unique_ptr<RefitClient>> c = RefitClient::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("token: byte 4 (0x0d)"));
  EXPECT_THAT(c.status().message(), Not(HasSubstr("abc")));
  o.bearer_token = "";
  for (const char* good : {"refitd-host:50051", "[::1]:50051", "dns:///refitd:7070",
                           "unix:/tmp/refitd.sock"}) {
    o.target = good;
    EXPECT_TRUE(RefitClient::CheckOptions(o, &sent).ok()) << good;
  }
  o.target = "https://refitd-host:50051";
  c = RefitClient::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("https://refitd-host:50051"));
}

TEST(RefitClientConnection, NewlineTokenAuthenticates) {
  std::unique_ptr<RefitServer> server = StartRefitd(kToken);
  ASSERT_NE(server, nullptr);
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", server->port());
  o.bearer_token = absl::StrCat(kToken, "\n");
  auto c = RefitClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->GetStatus(absl::Now() + absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace refit
