// A round version run again after its abort, through the data plane (Gloo,
// host buffers) against refitd: the trainer fails round 1 after the engine
// connected, then starts version 1 again; the second attempt bootstraps
// under keys of its own (not the aborted attempt's) and moves every byte
// (checked); the engine, torn by the aborted attempt, holds version 1.
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "client/member.h"
#include "gtest/gtest.h"
#include "server/default_plan.h"
#include "server/refit_server.h"
#include "testing/member_patterns.h"

namespace refit {
namespace {

struct Node {
  MemberOptions options;
  std::map<std::string, std::vector<char>> memory;
  std::unique_ptr<Member> member;
};

TEST(RoundRetryMemberTest, AVersionRunAgainAfterItsAbortMovesEveryByte) {
  RefitServer::Options so;
  so.plan_function = DefaultPlanFunction({});
  absl::StatusOr<std::unique_ptr<RefitServer>> server = RefitServer::Start(std::move(so));
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<Node> nodes(2);  // the trainer, engine A
  for (int i = 0; i < 2; ++i) {
    MemberOptions& o = nodes[i].options;
    o.connection.target = absl::StrCat("127.0.0.1:", (*server)->port());
    o.model = "tiny-llama";
    o.side = i == 0 ? Side::kTrainer : Side::kEngine;
    o.convention = i == 0 ? "megatron:tp=1" : "vllm:tp=1";
    if (i == 1) o.engine_id = "A";
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (Node& n : nodes) {
    absl::StatusOr<std::vector<LocalBuffer>> want = ExpectedBuffers(n.options);
    ASSERT_TRUE(want.ok()) << want.status();
    std::map<std::string, BufferRef> refs;
    for (const LocalBuffer& b : *want) {
      std::vector<char>& m = n.memory[b.name];
      m.assign(b.byte_size, static_cast<char>(0xEE));
      refs[b.name] = BufferRef{m.data(), b.byte_size};
    }
    absl::StatusOr<std::unique_ptr<Member>> m =
        Member::Join(n.options, std::move(refs), DataPlaneOptions(), deadline);
    ASSERT_TRUE(m.ok()) << m.status();
    n.member = std::move(*m);
  }
  absl::Status engine_first, trainer, engine;
  std::thread t([&] {
    Member& m = *nodes[0].member;
    absl::Status s = m.Prepare(deadline);
    if (s.ok()) s = testing::FillMemberPattern(m, 1);
    if (s.ok()) s = m.StartRound(1, deadline);
    absl::StatusOr<int64_t> v = s.ok() ? m.WaitForRound(deadline) : s;
    // Attempt 1: the engine has connected (its bootstrap keys are set);
    // the trainer fails it.
    absl::SleepFor(absl::Milliseconds(500));
    if (v.ok()) s = m.client().ReportFailed(*v, "injected fault", deadline);
    if (s.ok()) s = m.StartRound(1, deadline);  // run version 1 again
    v = s.ok() ? m.WaitForRound(deadline) : s;
    if (v.ok() && *v != 1) v = absl::InternalError(absl::StrCat("round ", *v, " announced"));
    trainer = v.ok() ? m.RunRound(*v, deadline).status() : v.status();
  });
  std::thread e([&] {
    Member& m = *nodes[1].member;
    absl::Status s = m.Prepare(deadline);
    absl::StatusOr<int64_t> v = s.ok() ? m.WaitForRound(deadline) : s;
    engine_first = v.ok() ? m.RunRound(*v, deadline).status() : v.status();
    v = m.WaitForRound(deadline);  // attempt 2
    s = v.ok() ? m.RunRound(*v, deadline).status() : v.status();
    if (s.ok()) s = testing::CheckMemberPattern(m, 1);
    engine = s;
  });
  t.join();
  e.join();
  EXPECT_EQ(engine_first.code(), absl::StatusCode::kAborted) << engine_first;
  EXPECT_NE(engine_first.message().find("injected fault"), absl::string_view::npos)
      << engine_first;
  EXPECT_TRUE(trainer.ok()) << trainer;
  EXPECT_TRUE(engine.ok()) << engine;
  auto state = nodes[0].member->client().GetEngineState("A", absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->committed, 1);
  EXPECT_EQ(state->torn, 0);
}

}  // namespace
}  // namespace refit
