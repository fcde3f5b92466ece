// Multi-process end-to-end tests over the Gloo transport on 127.0.0.1: one
// gloo_worker process per rank; bytes must be equal on every engine rank,
// and a killed peer must make the others fail within the deadline.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "testing/test_patterns.h"

namespace refit {
namespace {

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(t ? t : "/tmp") + "/gloo_XXXXXX";
  char* d = mkdtemp(tmpl.data());
  return d ? d : "";
}

struct Outcome {
  std::vector<int> codes;  // exit code per rank (-signal if killed)
  absl::Duration elapsed;
};

// Launches one worker per global rank and waits (bounded) for all.
Outcome Launch(const std::string& pattern, int world, int lanes, int steps,
               int timeout_ms, int die_rank = -1) {
  const std::string dir = TempDir();
  std::vector<pid_t> pids;
  const absl::Time start = absl::Now();
  for (int g = 0; g < world; ++g) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("NCCL_NVLS_ENABLE", "0", 1);
      std::vector<std::string> args = {
          "tests/dataplane/gloo_worker", pattern, std::to_string(g), dir,
          std::to_string(lanes), std::to_string(steps),
          std::to_string(timeout_ms)};
      if (g == die_rank) args.push_back("die");
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  Outcome out;
  out.codes.assign(world, -1000);
  const absl::Time hard = absl::Now() + absl::Seconds(45);
  int left = world;
  while (left > 0 && absl::Now() < hard) {
    for (int g = 0; g < world; ++g) {
      if (out.codes[g] != -1000) continue;
      int st = 0;
      if (waitpid(pids[g], &st, WNOHANG) == pids[g]) {
        out.codes[g] = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
        --left;
      }
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  for (int g = 0; g < world; ++g) {
    if (out.codes[g] == -1000) {  // hung: kill it (the test then fails)
      kill(pids[g], SIGKILL);
      waitpid(pids[g], nullptr, 0);
    }
  }
  out.elapsed = absl::Now() - start;
  return out;
}

class GlooPatternTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GlooPatternTest, BytesEqualOnEveryRank) {
  auto plan = testing::MakePatternPlan(GetParam(), 2, 2);
  ASSERT_TRUE(plan.ok());
  const int world = plan->src.world_size + plan->dst.world_size;
  Outcome o = Launch(GetParam(), world, 2, 2, 20000);
  for (int g = 0; g < world; ++g) {
    EXPECT_EQ(o.codes[g], 0) << "pattern " << GetParam() << " global rank " << g;
  }
}

INSTANTIATE_TEST_SUITE_P(Patterns, GlooPatternTest,
                         ::testing::ValuesIn(testing::PatternNames()));

TEST(GlooE2eTest, KilledPeerMakesOthersFailWithinDeadline) {
  // 2to2: global rank 3 (engine rank 1) dies after connecting.
  const int timeout_ms = 3000;
  Outcome o = Launch("2to2", 4, 2, 1, timeout_ms, /*die_rank=*/3);
  EXPECT_EQ(o.codes[3], -SIGKILL);
  // Each survivor fails (never hangs): with a run error (3), or, if it
  // was still connecting its other lanes when the peer died, a connect
  // error (2) — both name the dead peer's connection.
  for (int g : {0, 1}) {
    EXPECT_TRUE(o.codes[g] == 3 || o.codes[g] == 2)
        << "trainer rank " << g << " should fail, got exit " << o.codes[g];
  }
  // Workers start, connect (< a few s) and fail within the deadline.
  EXPECT_LT(o.elapsed, absl::Milliseconds(timeout_ms) + absl::Seconds(15));
}

}  // namespace
}  // namespace refit
