// The C ABI as a binding uses it: option and buffer errors name what is
// wrong before anything is contacted, an absent refitd fails within the
// timeout, and a trainer and an engine joined through it move a round
// against an in-process refitd with every engine byte checked.
#include "client/c_api.h"

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/default_plan.h"
#include "server/refit_server.h"
#include "testing/c_api_testing.h"

namespace refit {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

constexpr int kInvalidArgument = 3;
constexpr int kDeadlineExceeded = 4;
constexpr int kFailedPrecondition = 9;
constexpr int kUnavailable = 14;

std::string Options(const std::string& side, int rank,
                    const std::string& convention,
                    const std::string& extra = "") {
  return absl::StrCat("{\"side\": \"", side, "\", \"rank\": ", rank,
                      ", \"model\": \"tiny-qwen3\", \"convention\": \"",
                      convention, "\"", extra, "}");
}

// Host memory for every buffer a member of `options` must give.
struct Buffers {
  std::vector<std::string> names;
  std::vector<std::vector<char>> storage;
  std::vector<const char*> c_names;
  std::vector<void*> ptrs;
  std::vector<int64_t> sizes;
};

Buffers Expected(const std::string& options) {
  char* out = nullptr;
  EXPECT_EQ(refit_expected_buffers(options.c_str(), &out), 0) << refit_last_error();
  Buffers b;
  if (out == nullptr) return b;
  json j = json::parse(out);
  refit_free(out);
  for (const json& e : j) {
    b.names.push_back(e["name"].get<std::string>());
    b.storage.emplace_back(e["bytes"].get<int64_t>(), 0);
  }
  for (size_t i = 0; i < b.names.size(); ++i) {
    b.c_names.push_back(b.names[i].c_str());
    b.ptrs.push_back(b.storage[i].data());
    b.sizes.push_back(static_cast<int64_t>(b.storage[i].size()));
  }
  return b;
}

int Join(const std::string& options, Buffers& b, double timeout_s,
         refit_member** m) {
  return refit_member_join(options.c_str(), static_cast<int32_t>(b.names.size()),
                           b.c_names.data(), b.ptrs.data(), b.sizes.data(),
                           timeout_s, m);
}

// refitd in process with the default plan function; `*addr` is the option
// text that points members at it (with 200 ms heartbeats).
std::unique_ptr<RefitServer> StartRefitd(std::string* addr) {
  RefitServer::Options so;
  so.coordinator.plan_function = DefaultPlanFunction();
  auto server = RefitServer::Start(std::move(so));
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  *addr = absl::StrCat(", \"server\": \"127.0.0.1:", (*server)->port(),
                       "\", \"heartbeat_ms\": 200");
  return std::move(*server);
}

TEST(CApi, ExpectedBuffersFollowTheConvention) {
  char* out = nullptr;
  ASSERT_EQ(refit_expected_buffers(Options("engine", 1, "vllm:tp=2").c_str(), &out), 0)
      << refit_last_error();
  json j = json::parse(out);
  refit_free(out);
  bool fused_qkv = false;
  for (const json& e : j) {
    EXPECT_GT(e["bytes"].get<int64_t>(), 0);
    fused_qkv |= e["name"] == "model.layers.0.self_attn.qkv_proj.weight";
  }
  EXPECT_TRUE(fused_qkv) << j.dump();
}

TEST(CApi, OptionErrorsNameTheOption) {
  char* out = nullptr;
  EXPECT_EQ(refit_expected_buffers("not json", &out), kInvalidArgument);
  EXPECT_THAT(refit_last_error(), HasSubstr("JSON object"));
  EXPECT_EQ(refit_expected_buffers(
                Options("trainer", 0, "megatron:tp=1", ", \"rnak\": 1").c_str(), &out),
            kInvalidArgument);
  EXPECT_THAT(refit_last_error(), HasSubstr("\"rnak\""));
  EXPECT_EQ(refit_expected_buffers(Options("critic", 0, "megatron:tp=1").c_str(), &out),
            kInvalidArgument);
  EXPECT_THAT(refit_last_error(), HasSubstr("\"side\""));
  EXPECT_EQ(refit_expected_buffers(Options("trainer", 4, "megatron:tp=2").c_str(), &out),
            kInvalidArgument);
  EXPECT_THAT(refit_last_error(), HasSubstr("rank 4"));
  EXPECT_EQ(refit_expected_buffers(
                "{\"side\": \"trainer\", \"rank\": 0, \"convention\": \"megatron:tp=1\"}",
                &out),
            kInvalidArgument);
  EXPECT_THAT(refit_last_error(), HasSubstr("\"model\""));
  EXPECT_EQ(refit_expected_buffers(
                Options("trainer", 0, "megatron:tp=1", ", \"transport\": \"rdma\"").c_str(),
                &out),
            kInvalidArgument);
  EXPECT_THAT(refit_last_error(), HasSubstr("\"transport\" is \"rdma\""));
  EXPECT_EQ(refit_expected_buffers(
                Options("trainer", 0, "megatron:tp=1", ", \"transport\": \"ipc\"").c_str(),
                &out),
            kInvalidArgument);
  EXPECT_THAT(refit_last_error(), HasSubstr("applies to GPU buffers"));
  // "pull" is the pull path's name, "ipc" (above) its earlier one: both are
  // accepted spellings, refused here only for host buffers.
  EXPECT_EQ(refit_expected_buffers(
                Options("trainer", 0, "megatron:tp=1", ", \"transport\": \"pull\"").c_str(),
                &out),
            kInvalidArgument);
  EXPECT_THAT(refit_last_error(), HasSubstr("applies to GPU buffers"));
  EXPECT_EQ(out, nullptr);
}

TEST(CApi, BufferErrorsNameRankAndParameterBeforeConnecting) {
  const std::string opts =
      Options("engine", 0, "vllm:tp=1", ", \"engine_id\": \"e0\", \"server\": \"127.0.0.1:1\"");
  Buffers b = Expected(opts);
  ASSERT_GT(b.names.size(), 2u);
  b.sizes[1] -= 2;                       // wrong size
  b.c_names.pop_back();                  // one missing
  b.names.pop_back();
  refit_member* m = nullptr;
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(Join(opts, b, 30, &m), kInvalidArgument);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  const std::string err = refit_last_error();
  EXPECT_THAT(err, HasSubstr(b.names[1]));
  EXPECT_THAT(err, HasSubstr("rank 0"));
  EXPECT_THAT(err, HasSubstr(Expected(opts).names.back()));
  EXPECT_EQ(m, nullptr);

  Buffers ok = Expected(opts);
  ok.ptrs[0] = nullptr;
  EXPECT_EQ(Join(opts, ok, 30, &m), kInvalidArgument);
  EXPECT_THAT(refit_last_error(), HasSubstr(ok.names[0] + ": the buffer's address is null"));
}

TEST(CApi, GpuBuffersNeedTheGpuLibrary) {
  const std::string opts = Options("trainer", 0, "megatron:tp=1",
                                   ", \"server\": \"127.0.0.1:1\", \"device\": \"cuda:0\"");
  Buffers b = Expected(opts);
  refit_member* m = nullptr;
  EXPECT_EQ(Join(opts, b, 5, &m), kFailedPrecondition);
  EXPECT_THAT(refit_last_error(), HasSubstr("librefit_client_gpu.so"));
}

TEST(CApi, AbsentServerFailsWithinTheTimeout) {
  const std::string opts =
      Options("trainer", 0, "megatron:tp=1", ", \"server\": \"127.0.0.1:1\"");
  Buffers b = Expected(opts);
  refit_member* m = nullptr;
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(Join(opts, b, 1.0, &m), kUnavailable);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_THAT(refit_last_error(), HasSubstr("127.0.0.1:1"));
  EXPECT_EQ(Join(opts, b, -1, &m), kInvalidArgument);
  EXPECT_THAT(refit_last_error(), HasSubstr("timeout"));
}

TEST(CApi, NullHandlesAreErrorsNotCrashes) {
  int64_t v = 0;
  EXPECT_EQ(refit_member_wait_for_round(nullptr, 1, &v), kInvalidArgument);
  EXPECT_EQ(refit_member_run_round(nullptr, 1, 1, nullptr), kInvalidArgument);
  EXPECT_EQ(refit_member_plan_changed(nullptr), 0);
  refit_member_close(nullptr);
  refit_free(nullptr);
}

// A trainer (Megatron TP1) and an engine (vLLM TP1, fused qkv / gate_up)
// joined through the C ABI, refitd in process: two rounds, the engine's
// bytes checked against each round's version after its commit.
TEST(CApi, TrainerAndEngineMoveRoundsThroughRefitd) {
  std::string addr;
  std::unique_ptr<RefitServer> server = StartRefitd(&addr);
  ASSERT_NE(server, nullptr);
  const std::string t_opts = Options("trainer", 0, "megatron:tp=1", addr);
  const std::string e_opts =
      Options("engine", 0, "vllm:tp=1", addr + ", \"engine_id\": \"e0\"");
  Buffers tb = Expected(t_opts);
  Buffers eb = Expected(e_opts);

  std::string engine_error;
  std::thread engine([&] {
    refit_member* m = nullptr;
    auto fail = [&](const char* what) {
      engine_error = absl::StrCat(what, ": ", refit_last_error());
    };
    if (Join(e_opts, eb, 30, &m) != 0) return fail("join");
    if (refit_member_prepare(m, 30, nullptr) != 0) return fail("prepare");
    for (int64_t want = 1; want <= 2; ++want) {
      int64_t v = 0;
      if (refit_member_wait_for_round(m, 30, &v) != 0) return fail("wait");
      if (v != want) engine_error = absl::StrCat("announced ", v, ", wanted ", want);
      if (refit_member_run_round(m, v, 30, nullptr) != 0) return fail("run");
      if (refit_testing_check_pattern(m, v, 0, nullptr, nullptr) != 0) return fail("check");
      if (refit_member_kv_set(m, absl::StrCat("checked/", v).c_str(), "1", 30) != 0) {
        return fail("kv_set");
      }
    }
    // refitd drops a member's keys when it leaves: stay until the trainer
    // has read the last one.
    char* read = nullptr;
    if (refit_member_kv_get(m, "trainer_read_all", 30, &read) != 0) return fail("kv_get");
    refit_free(read);
    refit_member_close(m);
  });

  refit_member* m = nullptr;
  ASSERT_EQ(Join(t_opts, tb, 30, &m), 0) << refit_last_error();
  char* info = nullptr;
  ASSERT_EQ(refit_member_prepare(m, 30, &info), 0) << refit_last_error();
  EXPECT_EQ(json::parse(info)["global_world"], 2);
  refit_free(info);
  for (int64_t v = 1; v <= 2; ++v) {
    ASSERT_EQ(refit_testing_fill_pattern(m, v, 0, nullptr, nullptr), 0) << refit_last_error();
    ASSERT_EQ(refit_member_start_round(m, v, 30), 0) << refit_last_error();
    int64_t got = 0;
    ASSERT_EQ(refit_member_wait_for_round(m, 30, &got), 0) << refit_last_error();
    char* stats = nullptr;
    ASSERT_EQ(refit_member_run_round(m, got, 30, &stats), 0) << refit_last_error();
    int64_t total = 0;
    for (int64_t s : tb.sizes) total += s;
    EXPECT_GT(json::parse(stats)["bytes_sent"].get<int64_t>(), 0);
    EXPECT_LE(json::parse(stats)["bytes_sent"].get<int64_t>(), total);
    refit_free(stats);
    char* value = nullptr;
    ASSERT_EQ(refit_member_kv_get(m, absl::StrCat("checked/", v).c_str(), 30, &value), 0)
        << refit_last_error();
    refit_free(value);
    int64_t current = 0;
    ASSERT_EQ(refit_member_current_version(m, "e0", 30, &current), 0);
    EXPECT_EQ(current, v);
  }
  ASSERT_EQ(refit_member_kv_set(m, "trainer_read_all", "1", 30), 0) << refit_last_error();
  engine.join();
  EXPECT_EQ(engine_error, "");
  refit_member_close(m);
}

// A trainer that did not Prepare after the membership changed cannot start
// a round on its stale plan; an engine that did not is refused before it
// moves a byte, and the round aborts for everyone at once rather than at the
// deadline of the members that wait for it.
TEST(CApi, RoundOnAStalePlanFailsFastForEveryone) {
  std::string addr;
  std::unique_ptr<RefitServer> server = StartRefitd(&addr);
  ASSERT_NE(server, nullptr);
  const std::string t_opts = Options("trainer", 0, "megatron:tp=1", addr);
  auto engine_opts = [&](const char* id) {
    return Options("engine", 0, "vllm:tp=1", absl::StrCat(addr, ", \"engine_id\": \"", id, "\""));
  };
  Buffers tb = Expected(t_opts), e0b = Expected(engine_opts("e0")),
          e1b = Expected(engine_opts("e1"));
  refit_member *t = nullptr, *e0 = nullptr, *e1 = nullptr;
  ASSERT_EQ(Join(t_opts, tb, 30, &t), 0) << refit_last_error();
  ASSERT_EQ(Join(engine_opts("e0"), e0b, 30, &e0), 0) << refit_last_error();
  ASSERT_EQ(refit_member_prepare(t, 30, nullptr), 0) << refit_last_error();
  ASSERT_EQ(refit_member_prepare(e0, 30, nullptr), 0) << refit_last_error();
  // Engine e1 joins: a new plan. Only e1 prepares it.
  ASSERT_EQ(Join(engine_opts("e1"), e1b, 30, &e1), 0) << refit_last_error();
  ASSERT_EQ(refit_member_prepare(e1, 30, nullptr), 0) << refit_last_error();
  const absl::Time changed = absl::Now() + absl::Seconds(10);
  while (refit_member_plan_changed(t) != 1 && absl::Now() < changed) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(refit_member_plan_changed(t), 1);
  // The trainer's plan is stale: refitd refuses the round before it starts
  // (none is wasted), naming the epochs.
  EXPECT_EQ(refit_member_start_round(t, 1, 30), kFailedPrecondition);
  EXPECT_THAT(refit_last_error(), HasSubstr("membership is at epoch"));
  EXPECT_THAT(refit_last_error(), HasSubstr("prepare again"));
  ASSERT_EQ(refit_member_prepare(t, 30, nullptr), 0) << refit_last_error();
  ASSERT_EQ(refit_member_start_round(t, 1, 30), 0) << refit_last_error();

  // Round 1: e0 is stale and refuses; the trainer and e1, which would wait
  // for e0, learn of the abort at once.
  struct Outcome {
    int code = -1;
    std::string error;
    absl::Duration took;
  };
  std::vector<Outcome> round1(3);
  std::vector<std::thread> members;
  refit_member* all[] = {t, e0, e1};
  for (int i = 0; i < 3; ++i) {
    members.emplace_back([&, i] {
      int64_t got = 0;
      if (refit_member_wait_for_round(all[i], 30, &got) != 0 || got != 1) return;
      const absl::Time t0 = absl::Now();
      round1[i].code = refit_member_run_round(all[i], got, 30, nullptr);
      round1[i].error = refit_last_error();
      round1[i].took = absl::Now() - t0;
    });
  }
  for (auto& th : members) th.join();
  EXPECT_EQ(round1[1].code, kFailedPrecondition) << round1[1].error;
  EXPECT_THAT(round1[1].error, HasSubstr("membership epoch"));
  EXPECT_THAT(round1[1].error, HasSubstr("call Prepare()"));
  for (int i : {0, 2}) {
    EXPECT_EQ(round1[i].code, 10) << round1[i].error;  // ABORTED, with the reason
    EXPECT_THAT(round1[i].error, HasSubstr("call Prepare()"));
    EXPECT_LT(round1[i].took, absl::Seconds(10));
  }
  int64_t v = 0;
  // Prepared again, the same members commit the next round.
  ASSERT_EQ(refit_member_prepare(e0, 30, nullptr), 0);
  std::vector<std::thread> engines;
  std::vector<int> codes(2, -1);
  for (int i = 0; i < 2; ++i) {
    engines.emplace_back([&, i] {
      refit_member* m = i == 0 ? e0 : e1;
      int64_t got = 0;
      if (refit_member_wait_for_round(m, 30, &got) != 0) return;
      codes[i] = refit_member_run_round(m, got, 30, nullptr);
    });
  }
  ASSERT_EQ(refit_member_start_round(t, 2, 30), 0) << refit_last_error();
  ASSERT_EQ(refit_member_wait_for_round(t, 30, &v), 0) << refit_last_error();
  EXPECT_EQ(v, 2);
  EXPECT_EQ(refit_member_run_round(t, v, 30, nullptr), 0) << refit_last_error();
  for (auto& th : engines) th.join();
  EXPECT_EQ(codes, std::vector<int>({0, 0}));
  for (refit_member* m : {t, e0, e1}) refit_member_close(m);
}

TEST(CApi, WaitWithoutRoundsTimesOut) {
  std::string addr;
  std::unique_ptr<RefitServer> server = StartRefitd(&addr);
  ASSERT_NE(server, nullptr);
  const std::string opts = Options("trainer", 0, "megatron:tp=1", addr);
  Buffers b = Expected(opts);
  refit_member* m = nullptr;
  ASSERT_EQ(Join(opts, b, 30, &m), 0) << refit_last_error();
  int64_t v = 0;
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(refit_member_wait_for_round(m, 0.5, &v), kDeadlineExceeded);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  refit_member_close(m);
}

}  // namespace
}  // namespace refit
