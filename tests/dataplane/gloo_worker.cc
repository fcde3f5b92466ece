// One rank of a multi-process data-plane test over the Gloo transport.
// Usage: gloo_worker <pattern> <global_rank> <store_dir> <lanes> <steps>
//                    <timeout_ms> [die]
// Builds the pattern's plan, fills (trainer) or checks (engine) its buffers
// for every step, checks that buffer pointers are unchanged. Exit 0 = PASS,
// 1 = wrong bytes, 2 = setup error, 3 = run error (message on stderr).
// With "die", the rank connects and then kills itself before the first run.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "exec/executor.h"
#include "exec/transport/gloo_transport.h"
#include "testing/dir_kv_store.h"
#include "testing/test_patterns.h"

using namespace refit;

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s pattern rank dir lanes steps timeout_ms [die]\n",
                 argv[0]);
    return 2;
  }
  const std::string pattern = argv[1];
  const int g = std::atoi(argv[2]);
  const int lanes = std::atoi(argv[4]);
  const int steps = std::atoi(argv[5]);
  const absl::Duration timeout = absl::Milliseconds(std::atoi(argv[6]));
  const bool die = argc > 7 && std::string(argv[7]) == "die";
  auto plan = testing::MakePatternPlan(pattern, lanes, 2);
  if (!plan.ok()) {
    std::fprintf(stderr, "%s\n", plan.status().ToString().c_str());
    return 2;
  }
  const int ws = plan->src.world_size;
  const int world = ws + plan->dst.world_size;
  testing::DirKvStore kv(argv[3]);
  GlooTransportOptions opt;
  opt.num_lanes = lanes;
  opt.connect_timeout = absl::Seconds(20);
  auto t = GlooTransport::Create(&kv, g, world, opt);
  if (!t.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", g, t.status().ToString().c_str());
    return 2;
  }
  if (die) raise(SIGKILL);
  const Side side = g < ws ? Side::kTrainer : Side::kEngine;
  const int rank = g < ws ? g : g - ws;
  const SideLayout& layout = g < ws ? plan->src : plan->dst;
  const char fill = static_cast<char>(0xEE);
  auto bufs = testing::AllocateRankBuffers(layout, rank, fill);
  const std::vector<char*> before = testing::Pointers(bufs);
  ExecutorOptions eo;
  eo.segment_checksums = true;
  auto ex = Executor::Create(*plan, side, rank, before, t->get(), eo);
  if (!ex.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", g, ex.status().ToString().c_str());
    return 2;
  }
  for (int step = 1; step <= steps; ++step) {
    if (side == Side::kTrainer) testing::FillRecords(layout, rank, step, &bufs);
    const absl::Time start = absl::Now();
    auto st = (*ex)->Run(start + timeout);
    if (!st.ok()) {
      std::fprintf(stderr, "rank %d: run failed after %.3f s: %s\n", g,
                   absl::ToDoubleSeconds(absl::Now() - start),
                   st.status().ToString().c_str());
      return 3;
    }
    if (side == Side::kEngine) {
      std::string c = testing::CheckRecords(layout, rank, step, fill, bufs);
      if (!c.empty()) {
        std::fprintf(stderr, "rank %d step %d: %s\n", g, step, c.c_str());
        return 1;
      }
    }
  }
  if (testing::Pointers(bufs) != before) {
    std::fprintf(stderr, "rank %d: buffer pointers changed\n", g);
    return 1;
  }
  return 0;
}
