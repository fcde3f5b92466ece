// Delta and verified rounds over Gloo (TCP on 127.0.0.1) and in-process:
// every rank a thread, a DeltaPolicy as refitd's stand-in, every byte of
// every engine checked against a reference copy after every round.
#include "exec/delta/delta_runner.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "testing/delta_rounds.h"
#include "exec/transport/inproc_transport.h"
#include "gtest/gtest.h"
#include "layout/mesh.h"
#include "layout/sharding.h"
#include "plan/planner.h"
#include "testing/counting_copier.h"
#include "testing/reference_copy.h"
#include "testing/test_patterns.h"

namespace refit {
namespace {

using testing::Change;
using testing::CheckEngines;
using testing::Job;
using testing::JobOf;
using testing::RoundResult;
using testing::RunRound;
using testing::SetBatchWindow;

std::unique_ptr<Job> MakeJob(const std::string& pattern, bool gloo, int rounds_per_stage = 2,
                             int32_t lanes = 2) {
  return JobOf(testing::MakePatternPlan(pattern, lanes, rounds_per_stage).value(), gloo);
}

// Two 512 KiB tensors between two trainer and two engine ranks, each cut
// by rows on one side and by columns on the other (every message packed
// on one side), planned by BuildPlan with `budget` bytes of staging; with
// `half_waves`, waves and messages of at most half the lane share (room
// beside each batch's packed bytes for its encodings).
Plan BudgetPlan(int64_t budget, bool half_waves = false) {
  SideLayout src, dst;
  src.world_size = dst.world_size = 2;
  const Mesh tp = *Mesh::Make({"tp"}, {2});
  for (int t = 0; t < 2; ++t) {
    TensorSpec spec{absl::StrCat("layers.", t, ".w"), {512, 512}, DType::kBF16};
    EXPECT_TRUE(AddTensor(src, spec).ok());
    EXPECT_TRUE(AddTensor(dst, spec).ok());
    EXPECT_TRUE(AddDenseShards(src, t, tp, {Placement::Shard(t)}).ok());
    EXPECT_TRUE(AddDenseShards(dst, t, tp, {Placement::Shard(1 - t)}).ok());
  }
  PlannerOptions o;
  o.staging_budget_bytes = budget;
  if (half_waves) o.max_wave_bytes = o.max_message_bytes = budget / o.num_lanes / 2;
  return BuildPlan(src, dst, o).value();
}

// The trainers' bytes, to roll back to.
std::vector<std::vector<uint8_t>> Save(const Job& job) { return job.trainer.storage; }
void Restore(const std::vector<std::vector<uint8_t>>& saved, Job* job) {
  for (size_t b = 0; b < saved.size(); ++b) {
    std::copy(saved[b].begin(), saved[b].end(), job->trainer.storage[b].begin());
  }
}

int64_t DenseMessages(const RoundResult& r, int engine_global) {
  return r.stats[engine_global].dense_messages;
}

class DeltaRounds : public ::testing::TestWithParam<bool> {};

TEST_P(DeltaRounds, ManyRoundsOfRandomChangesLandEveryByte) {
  // Batches of a few plan waves (a small staging budget), and the default
  // (here: all waves of a lane in one batch).
  for (bool small : {true, false}) {
  for (const char* pattern : {"2to2", "qkv", "1to3", "replicated"}) {
    SCOPED_TRACE(absl::StrCat(small ? "small" : "default", " budget"));
    auto job = MakeJob(pattern, GetParam());
    if (small) {
      int64_t total = 0;
      for (const Message& m : job->plan.messages) total += m.bytes;
      SetBatchWindow(&job->plan, total / 8);
    }
    const int ws = job->plan.src.world_size;
    const double fractions[] = {1.0, 0.005, 0.02, 0.05, 0.2, 0.0, 0.9, 0.02};
    int64_t wire = 0, dense = 0;
    for (double f : fractions) {
      Change(job.get(), f);
      RoundResult r = RunRound(job.get());
      ASSERT_TRUE(r.commit.ok()) << pattern << " fraction " << f << ": " << r.commit;
      ASSERT_EQ(CheckEngines(*job), "") << pattern << " fraction " << f;
      if (job->version > 1) {
        for (int g = 0; g < ws; ++g) {
          wire += r.stats[g].wire_bytes;
          dense += r.stats[g].dense_bytes;
        }
      }
    }
    EXPECT_LT(wire, dense) << pattern;  // the deltas moved fewer bytes
  }
  }
}

// A batch's encoded payloads to one peer travel as one transfer (each a
// step of the transport's kernel): fewer transfers than messages, and
// every byte lands (trainer pipeline stages: several messages a peer).
TEST_P(DeltaRounds, ABatchsDeltasToAPeerTravelAsOneTransfer) {
  auto job = MakeJob("pp", GetParam(), 8);
  const int ws = job->plan.src.world_size;
  const int world = ws + job->plan.dst.world_size;
  for (double f : {1.0, 0.02, 0.05}) {
    Change(job.get(), f);
    RoundResult r = RunRound(job.get());
    ASSERT_TRUE(r.commit.ok()) << "fraction " << f << ": " << r.commit;
    ASSERT_EQ(CheckEngines(*job), "") << "fraction " << f;
    if (f == 1.0) continue;  // the first round: dense everywhere
    for (int g = 0; g < world; ++g) {
      const DeltaRoundStats& st = r.stats[g];
      const int64_t peers = g < ws ? job->plan.dst.world_size : ws;
      ASSERT_GT(st.messages - st.dense_messages, st.batches * peers) << "rank " << g;
      EXPECT_LE(st.transfers, st.batches * peers + st.dense_messages) << "rank " << g;
      EXPECT_LT(st.transfers, st.messages - st.dense_messages) << "rank " << g;
    }
  }
}

// Every rank runs the slice of the plan refitd hands it (its own messages,
// the waves holding them): batches of a few waves each still match on both
// sides of every pair, every byte lands, dense round and delta rounds.
TEST_P(DeltaRounds, RanksRunningTheirSlicesCutTheSameBatches) {
  for (const char* pattern : {"2to2", "1to3", "qkv", "replicated", "pp"}) {
  SCOPED_TRACE(pattern);
  auto job = MakeJob(pattern, GetParam(), 6);
  job->sliced = true;
  int64_t total = 0;
  for (const Message& m : job->plan.messages) total += m.bytes;
  SetBatchWindow(&job->plan, total / 8);  // several batches a lane
  for (double f : {1.0, 0.02, 0.2}) {
    Change(job.get(), f);
    RoundResult r = RunRound(job.get(), {}, {}, absl::Seconds(10));
    ASSERT_TRUE(r.commit.ok()) << "fraction " << f << ": " << r.commit;
    ASSERT_EQ(CheckEngines(*job), "") << "fraction " << f;
  }
  }
}

// The plan's staging budget binds delta rounds, relays included: a dense
// round, then delta rounds, on plans whose every rank packs several times
// the budget (full waves, and waves of half the lane share), and on a plan
// of one trainer replica relayed to three engine replicas; the whole plan
// on every rank, and slices as refitd hands them out. What each runner
// took from its copier (counted there) never passes the budget, and is what
// it reports; its lanes and ring were in use, within it; every byte lands.
// With room beside the packed bytes (half waves, relays) the deltas
// travel encoded; in full waves what does not fit travels dense.
TEST_P(DeltaRounds, RoundsHoldAtMostThePlansStagingBudget) {
  struct Case {
    const char* name;
    Plan plan;
  };
  std::vector<Case> cases;
  cases.push_back({"full waves", BudgetPlan(64 << 10)});
  cases.push_back({"half waves", BudgetPlan(64 << 10, true)});
  cases.push_back({"relays", testing::MakePatternPlan("relay", 2, 2).value()});
  for (Case& c : cases) {
  for (bool sliced : {false, true}) {
    SCOPED_TRACE(absl::StrCat(c.name, sliced ? ", slices" : ", whole plan"));
    auto job = JobOf(c.plan, GetParam());
    job->sliced = sliced;
    const Plan& plan = job->plan;
    const int64_t budget = plan.options.staging_budget_bytes;
    const int ws = plan.src.world_size, world = ws + plan.dst.world_size;
    std::vector<int64_t> packed(world, 0);
    for (const Message& m : plan.messages) {
      if (!m.src_contiguous) packed[m.relay ? ws + m.src_rank : m.src_rank] += m.bytes;
      if (!m.dst_contiguous) packed[ws + m.dst_rank] += m.bytes;
    }
    const bool relays = std::string(c.name) == "relays";
    if (!relays) {
      for (int g = 0; g < world; ++g) ASSERT_GT(packed[g], 2 * budget) << "rank " << g;
    }
    int64_t held = 0;
    for (double f : {1.0, 0.02, 0.005, 0.2, 0.0, 0.02}) {
      Change(job.get(), f);
      RoundResult r = RunRound(job.get(), {}, {}, absl::Seconds(20));
      ASSERT_TRUE(r.commit.ok()) << "fraction " << f << ": " << r.commit;
      ASSERT_EQ(CheckEngines(*job), "") << "fraction " << f;
      int64_t wire = 0, dense = 0, for_room = 0;
      for (int g = 0; g < world; ++g) {
        const DeltaRoundStats& st = r.stats[g];
        EXPECT_GT(r.allocated_peak[g], 0) << "rank " << g;
        EXPECT_LE(r.allocated_peak[g], budget) << "rank " << g << " fraction " << f;
        EXPECT_EQ(r.run[g].peak_staging_bytes, r.allocated_peak[g]) << "rank " << g;
        // Every rank packs (the relay plan's messages lie whole in place).
        if (!relays) EXPECT_GT(st.peak_used_bytes, 0) << "rank " << g << " fraction " << f;
        EXPECT_LE(st.peak_used_bytes, r.allocated_peak[g]) << "rank " << g;
        EXPECT_LE(st.staging_bytes + st.encoding_bytes, budget) << "rank " << g;
        held = std::max(held, st.held_bytes);
        if (g < ws) {
          wire += st.wire_bytes;
          dense += st.dense_bytes;
          for_room += st.dense_for_room;
        }
      }
      const bool full = std::string(c.name) == "full waves";
      if (f == 0.02 && job->version > 2 && !full) {
        EXPECT_EQ(for_room, 0);
        EXPECT_LT(wire, dense / 4);
      }
      if (f == 0.02 && job->version > 2 && full) {
        EXPECT_GT(for_room, 0);
      }
    }
    // A relay kept payloads for its forwards, within the budget.
    if (relays) EXPECT_GT(held, 0);
  }
  }
}

// A budget too small for one batch of a rank is refused when the runner is
// created, naming the parameter, the budget and the batch: no round runs.
TEST(DeltaRunner, ABudgetTooSmallForOneBatchIsRefusedNamingIt) {
  Plan plan = BudgetPlan(64 << 10);
  plan.options.staging_budget_bytes = 1024;
  const int ws = plan.src.world_size;
  auto fabric = InProcFabric::Create(ws + plan.dst.world_size, plan.options.num_lanes).value();
  for (Side side : {Side::kTrainer, Side::kEngine}) {
    const int g = side == Side::kTrainer ? 0 : ws;
    auto t = InProcTransport::Create(fabric, g).value();
    OwnedBuffers b = AllocateBuffers(side == Side::kTrainer ? plan.src : plan.dst, 0);
    std::vector<char*> p;
    for (auto& x : b.storage) p.push_back(reinterpret_cast<char*>(x.data()));
    auto r = DeltaRunner::Create(plan, side, 0, p, t.get());
    ASSERT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    for (const char* word : {"staging_budget_bytes", "--staging_mib", "1024 bytes", "rank 0",
                             "lane", "at least"}) {
      EXPECT_TRUE(absl::StrContains(r.status().message(), word)) << word << ": " << r.status();
    }
  }
}

// Plans of three and four lanes (the planner chooses four for plans of
// many staged pieces): batches go round the lanes, every byte lands.
TEST_P(DeltaRounds, RoundsOnThreeAndFourLanesLandEveryByte) {
  for (int32_t lanes : {3, 4}) {
    SCOPED_TRACE(absl::StrCat(lanes, " lanes"));
    auto job = MakeJob("2to2", GetParam(), 6, lanes);
    for (double f : {1.0, 0.02, 0.2}) {
      Change(job.get(), f);
      RoundResult r = RunRound(job.get());
      ASSERT_TRUE(r.commit.ok()) << "fraction " << f << ": " << r.commit;
      ASSERT_EQ(CheckEngines(*job), "") << "fraction " << f;
    }
  }
}

// A batch is one group of sends on the trainer (headers, then payloads)
// and two groups of receives on the engine; by default a small plan's
// waves of one lane make one batch.
TEST_P(DeltaRounds, ABatchOfWavesIsOneGroupOfSends) {
  auto job = MakeJob("2to2", GetParam(), 4);
  const int ws = job->plan.src.world_size;
  const int world = ws + job->plan.dst.world_size;
  ASSERT_GT(job->plan.waves.size(), 2u);  // more waves than lanes
  for (int round = 0; round < 2; ++round) {
    Change(job.get(), 0.05);
    RoundResult r = RunRound(job.get());
    ASSERT_TRUE(r.commit.ok()) << r.commit;
    ASSERT_EQ(CheckEngines(*job), "");
    for (int g = 0; g < world; ++g) {
      const DeltaRoundStats& st = r.stats[g];
      EXPECT_GE(st.batches, 1) << "rank " << g;
      EXPECT_LE(st.batches, 2) << "rank " << g;  // one per lane
      // RunStats counts the plan's waves the rank ran, not its batches.
      EXPECT_GT(r.run[g].waves, st.batches) << "rank " << g;
      EXPECT_EQ(st.groups, (g < ws ? 1 : 2) * st.batches) << "rank " << g;
      // A batch's encoded payloads to (from) one peer are one transfer.
      const int64_t peers = g < ws ? job->plan.dst.world_size : ws;
      EXPECT_LE(st.transfers, st.batches * peers + st.dense_messages) << "rank " << g;

      // Every batch's steps, in the order each member takes them.
      ASSERT_EQ(static_cast<int64_t>(st.batch_times.size()), st.batches) << "rank " << g;
      for (const DeltaBatchTimes& t : st.batch_times) {
        EXPECT_LE(0, t.start) << "rank " << g;
        EXPECT_LE(t.start, t.ready) << "rank " << g;
        EXPECT_LE(t.ready, t.posted) << "rank " << g;
        if (g >= ws) {
          EXPECT_LE(t.posted, t.applied) << "rank " << g;
        }
      }
    }
  }
}

TEST_P(DeltaRounds, FreshEnginesGetDenseWhileTheOthersGetDeltaInOneRound) {
  auto job = MakeJob("1to3", GetParam());
  const int ws = job->plan.src.world_size;
  ASSERT_TRUE(RunRound(job.get()).commit.ok());
  // Engine rank 0 restarts (its buffers are garbage) and engine rank 2
  // joins late (its buffers were never written): neither holds a version.
  for (int e : {0, 2}) {
    for (size_t b = 0; b < job->plan.dst.buffers.size(); ++b) {
      if (job->plan.dst.buffers[b].rank != e) continue;
      for (auto& x : job->engine.storage[b]) x = static_cast<uint8_t>(job->rng());
    }
    ASSERT_TRUE(job->policy->OnEngineJoined(e).ok());
  }
  Change(job.get(), 0.01);
  auto modes = job->policy->Announce(true);
  EXPECT_EQ(EngineDeltaModeText(modes[0]), "dense");
  EXPECT_EQ(EngineDeltaModeText(modes[1]), "delta against version 1");
  RoundResult r = RunRound(job.get());
  ASSERT_TRUE(r.commit.ok()) << r.commit;
  EXPECT_EQ(CheckEngines(*job), "");
  EXPECT_EQ(DenseMessages(r, ws + 0), r.stats[ws + 0].messages);
  EXPECT_EQ(DenseMessages(r, ws + 2), r.stats[ws + 2].messages);
  EXPECT_EQ(DenseMessages(r, ws + 1), 0);
  EXPECT_GT(r.stats[ws + 1].messages, 0);
}

TEST_P(DeltaRounds, AnAbortedDeltaRoundIsRepairedByItsRetry) {
  auto job = MakeJob("1to3", GetParam());
  const int ws = job->plan.src.world_size;
  ASSERT_TRUE(RunRound(job.get()).commit.ok());
  // Version 2's round aborts: engine rank 1 never runs; engines 0 and 2
  // apply their deltas and are torn (they hold bytes of an uncommitted
  // version).
  Change(job.get(), 0.05);
  RoundResult aborted = RunRound(job.get(), {ws + 1}, {}, absl::Seconds(2));
  ASSERT_FALSE(aborted.commit.ok());
  EXPECT_EQ(job->version, 1);
  EXPECT_TRUE(job->policy->torn(0));
  // Its retry aborts too, after every engine applied it.
  const auto v1 = Save(*job);
  Change(job.get(), 0.05);
  ASSERT_FALSE(RunRound(job.get(), {}, {}, absl::Seconds(20), true).commit.ok());
  Restore(v1, job.get());  // the trainer rolls back its step
  // The retry carries other bytes (the trainer stepped again): dense to
  // every torn engine, and every byte lands.
  Change(job.get(), 0.05);
  for (const auto& m : job->policy->Announce(true)) EXPECT_TRUE(m.dense);
  RoundResult retry = RunRound(job.get());
  ASSERT_TRUE(retry.commit.ok()) << retry.commit;
  EXPECT_EQ(CheckEngines(*job), "");
  // And the next round is a delta round again.
  Change(job.get(), 0.01);
  RoundResult next = RunRound(job.get());
  ASSERT_TRUE(next.commit.ok()) << next.commit;
  EXPECT_EQ(CheckEngines(*job), "");
  EXPECT_EQ(DenseMessages(next, ws + 0), 0);
}

TEST_P(DeltaRounds, ADeltaToATornEngineWouldBeCaughtByTheDigest) {
  // The rule above matters: sending deltas to torn engines anyway leaves
  // wrong bytes, and the verified round refuses to commit them.
  auto job = MakeJob("1to3", GetParam());
  ASSERT_TRUE(RunRound(job.get()).commit.ok());
  const auto v1 = Save(*job);
  Change(job.get(), 0.2);
  // Every engine applies version 2's deltas, then the round aborts and the
  // trainer rolls its step back: version 1's bytes plus other changes.
  ASSERT_FALSE(RunRound(job.get(), {}, {}, absl::Seconds(20), true).commit.ok());
  EXPECT_TRUE(job->policy->torn(1));
  Restore(v1, job.get());
  Change(job.get(), 0.2);
  std::vector<EngineDeltaMode> wrong(job->plan.dst.world_size, EngineDeltaMode{false, 1});
  RoundResult r = RunRound(job.get(), {}, wrong);
  EXPECT_TRUE(absl::IsDataLoss(r.commit)) << r.commit;
  EXPECT_NE(CheckEngines(*job), "");
}

TEST_P(DeltaRounds, AByteFlippedInAnEngineFailsTheNextCommitNamingIt) {
  auto job = MakeJob("2to2", GetParam());
  ASSERT_TRUE(RunRound(job.get()).commit.ok());
  const Plan& plan = job->plan;
  const Record& rec = plan.dst.records[plan.segments[0].dst_record];
  job->engine.storage[rec.buffer][rec.byte_offset] ^= 0x10;
  RoundResult r = RunRound(job.get());  // nothing changed: an empty delta
  ASSERT_TRUE(absl::IsDataLoss(r.commit)) << r.commit;
  EXPECT_TRUE(absl::StrContains(
      r.commit.message(),
      absl::StrCat("engine rank ", rec.rank, " tensor ", plan.dst.tensors[rec.tensor].name)))
      << r.commit;
  EXPECT_EQ(job->version, 1);
}

// One trainer replica (two ranks) feeding three engine replicas, each on
// a host of its own, planned with relays: the replicas forward what they
// receive to each other. Dense, then delta rounds: every byte of every
// replica checked after each, digests compared, the relays repeating the
// trainer's encoded payloads (far fewer bytes than the regions they
// forward). Every rank runs the whole plan, or its slice as refitd hands
// it out (a trainer's carries the relays of its bytes, to digest them).
TEST_P(DeltaRounds, RelayedReplicasGetEveryByteDenseThenDeltas) {
  for (bool sliced : {false, true}) {
  SCOPED_TRACE(sliced ? "slices" : "whole plan");
  auto job = MakeJob("relay", GetParam());
  job->sliced = sliced;
  const Plan& plan = job->plan;
  const int ws = plan.src.world_size, world = ws + plan.dst.world_size;
  const int64_t relayed = testing::RelayedBytes(plan);
  ASSERT_GT(relayed, 0);
  for (double f : {1.0, 0.02, 0.005, 0.2, 0.0, 0.02}) {
    const bool dense = job->version == 0;
    RoundResult r;
    ASSERT_EQ(testing::ChangeAndCommit(job.get(), f, &r), "");
    int64_t forwarded = 0, forwarded_dense = 0;
    for (int g = ws; g < world; ++g) {
      forwarded += r.stats[g].forwarded_bytes;
      forwarded_dense += r.stats[g].forwarded_dense_bytes;
    }
    if (dense) {
      EXPECT_EQ(forwarded_dense, relayed);
    }
    // A forward that joins regions of two received messages goes dense
    // (as do forwards repeating it); the plan's others repeat payloads.
    if (!dense && f < 0.05) {
      EXPECT_LT(forwarded_dense, relayed / 4) << "fraction " << f;
      EXPECT_LT(forwarded, relayed / 2) << "fraction " << f;
    }
  }
  // A downstream replica announced dense (say a fresh one) while its relay
  // gets a delta: the relay forwards the dense bytes of its buffer.
  const Message* relay = nullptr;
  for (const Message& m : plan.messages) {
    if (m.relay && relay == nullptr) relay = &m;
  }
  std::vector<EngineDeltaMode> modes = job->policy->Announce(true);
  modes[relay->dst_rank] = EngineDeltaMode{};
  Change(job.get(), 0.02);
  RoundResult mixed = RunRound(job.get(), {}, modes);
  ASSERT_TRUE(mixed.commit.ok()) << mixed.commit;
  ASSERT_EQ(CheckEngines(*job), "");
  EXPECT_GE(mixed.stats[ws + relay->src_rank].forwarded_dense_bytes, relay->bytes);
  EXPECT_GT(mixed.stats[ws + relay->dst_rank].dense_messages, 0);
  }
}

// A relay that never forwards (it connected, then died): the replicas it
// feeds fail within the round's deadline naming it, and the round aborts;
// the next round, with the relay back, repairs every replica.
TEST_P(DeltaRounds, ADeadRelayFailsItsDownstreamNamingIt) {
  auto job = MakeJob("relay", GetParam());
  ASSERT_TRUE(RunRound(job.get()).commit.ok());
  const Message* relay = nullptr;
  for (const Message& m : job->plan.messages) {
    if (m.relay && relay == nullptr) relay = &m;
  }
  ASSERT_NE(relay, nullptr);
  EXPECT_EQ(testing::DeadRelayFailsItsDownstream(job.get(), *relay), "");
}

INSTANTIATE_TEST_SUITE_P(Transports, DeltaRounds, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Gloo" : "InProc"; });

TEST(DeltaRunner, ASnapshotBoundRefusesTheTrainerNamingRankAndBound) {
  Plan plan = testing::MakePatternPlan("2to2", 1, 1).value();
  const int64_t need = DeltaRunner::SnapshotBytes(plan, 1);
  ASSERT_GT(need, 0);
  auto fabric = InProcFabric::Create(4, 1).value();
  auto t = InProcTransport::Create(fabric, 1).value();
  OwnedBuffers b = AllocateBuffers(plan.src, 0);
  std::vector<char*> p;
  for (auto& x : b.storage) p.push_back(reinterpret_cast<char*>(x.data()));
  DeltaRunnerOptions opt;
  opt.max_snapshot_bytes = need - 1;
  auto r = DeltaRunner::Create(plan, Side::kTrainer, 1, p, t.get(), opt);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "trainer rank 1")) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), absl::StrCat(need - 1))) << r.status();
  opt.max_snapshot_bytes = need;
  EXPECT_TRUE(DeltaRunner::Create(plan, Side::kTrainer, 1, p, t.get(), opt).ok());
}

// The counts' figures come from their windows, in any order.
TEST(DeltaRoundStatsTest, CountFiguresFromTheirWindows) {
  DeltaRoundStats st;
  EXPECT_EQ(st.counts(), 0);
  EXPECT_EQ(st.count_span_gpu_seconds(), 0);
  st.count_windows = {{2.0, 3.0}, {1.0, 1.5}, {3.5, 4.0}};
  EXPECT_EQ(st.counts(), 3);
  EXPECT_DOUBLE_EQ(st.count_gpu_seconds(), 2.0);
  EXPECT_DOUBLE_EQ(st.count_span_gpu_seconds(), 3.0);
}

}  // namespace
}  // namespace refit
