// The delta round harness (see delta_rounds.h).
#include "testing/delta_rounds.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "exec/delta/round_digest.h"
#include "exec/transport/gloo_transport.h"
#include "exec/transport/inproc_transport.h"
#include "exec/transport/kv_store.h"
#include "plan/plan_codec.h"
#include "testing/counting_copier.h"

namespace refit {
namespace testing {

std::unique_ptr<Job> JobOf(Plan plan, bool gloo) {
  auto job = std::make_unique<Job>();
  job->lanes = plan.options.num_lanes;
  job->plan = std::move(plan);
  job->trainer = AllocateBuffers(job->plan.src, 0);
  job->engine = AllocateBuffers(job->plan.dst, 0xEE);
  job->snapshots.resize(job->plan.src.world_size);
  job->policy = std::make_unique<DeltaPolicy>(job->plan.dst.world_size);
  job->gloo = gloo;
  for (auto& b : job->trainer.storage) {
    for (auto& x : b) x = static_cast<uint8_t>(job->rng());
  }
  return job;
}

void SetBatchWindow(Plan* plan, int64_t window) {
  const int ws = plan->src.world_size;
  int64_t largest = 0;
  for (const Wave& w : plan->waves) {
    std::vector<int64_t> of(ws + plan->dst.world_size, 0);
    for (int32_t mi = w.first_message; mi < w.first_message + w.num_messages; ++mi) {
      const Message& m = plan->messages[mi];
      of[m.relay ? ws + m.src_rank : m.src_rank] += m.bytes + 256;
      largest = std::max(largest, of[ws + m.dst_rank] += m.bytes + 256);
    }
    for (int64_t b : of) largest = std::max(largest, b);
  }
  plan->options.staging_budget_bytes =
      plan->options.num_lanes * std::max(2 * window, 2 * largest);
}

void Change(Job* job, double fraction) {
  for (auto& b : job->trainer.storage) {
    std::bernoulli_distribution pick(fraction);
    for (size_t i = 0; i + 1 < b.size(); i += 2) {
      if (!pick(job->rng)) continue;
      b[i] ^= static_cast<uint8_t>(1 + job->rng() % 255);
    }
  }
}

RoundResult RunRound(Job* job, std::set<int> absent, std::vector<EngineDeltaMode> modes,
                     absl::Duration timeout, bool abort_after) {
  const Plan& plan = job->plan;
  const int ws = plan.src.world_size, world = ws + plan.dst.world_size;
  if (modes.empty()) modes = job->policy->Announce(true);
  RoundResult res;
  res.status.assign(world, absl::OkStatus());
  res.run.resize(world);
  res.stats.resize(world);
  res.allocated_peak.assign(world, 0);
  std::vector<DigestSums> digests(world);
  // Transports and copiers outlive every rank's round (and the runners
  // using them).
  std::vector<std::unique_ptr<Transport>> transports(world);
  std::vector<std::unique_ptr<testing::CountingCopier>> copiers(world);
  std::vector<std::unique_ptr<DeltaRunner>> runners(world);
  InMemoryKvStore store;
  auto fabric = InProcFabric::Create(world, job->lanes).value();
  std::vector<Plan> slices(world);
  if (job->sliced) {
    for (int g = 0; g < world; ++g) {
      slices[g] = ExtractSlice(plan, g < ws ? Side::kTrainer : Side::kEngine, g < ws ? g : g - ws);
    }
  }
  std::vector<std::thread> threads;
  const absl::Time deadline = absl::Now() + timeout;
  for (int g = 0; g < world; ++g) {
    threads.emplace_back([&, g] {
      std::unique_ptr<Transport>& t = transports[g];
      if (job->gloo) {
        GlooTransportOptions o;
        o.num_lanes = job->lanes;
        o.connect_timeout = absl::Seconds(30);
        auto gt = GlooTransport::Create(&store, g, world, o);
        if (!gt.ok()) {
          res.status[g] = gt.status();
          return;
        }
        t = std::move(*gt);
      } else {
        t = InProcTransport::Create(fabric, g).value();
      }
      const bool src = g < ws;
      std::vector<char*> bufs;
      OwnedBuffers& own = src ? job->trainer : job->engine;
      for (auto& b : own.storage) bufs.push_back(reinterpret_cast<char*>(b.data()));
      if (job->sliced) {  // the slice's buffers: this rank's by name, none of the peers'
        const SideLayout& full = src ? plan.src : plan.dst;
        const SideLayout& mine = src ? slices[g].src : slices[g].dst;
        const int rank = src ? g : g - ws;
        std::vector<char*> by_slice(mine.buffers.size(), nullptr);
        for (size_t i = 0; i < mine.buffers.size(); ++i) {
          for (size_t b = 0; b < full.buffers.size(); ++b) {
            if (mine.buffers[i].rank == rank && full.buffers[b].rank == rank &&
                full.buffers[b].name == mine.buffers[i].name) {
              by_slice[i] = bufs[b];
            }
          }
        }
        bufs = std::move(by_slice);
      }
      DeltaRunnerOptions opt;
      copiers[g] = std::make_unique<testing::CountingCopier>();
      opt.copier = copiers[g].get();
      if (src) opt.snapshot = &job->snapshots[g];
      auto r = DeltaRunner::Create(job->sliced ? slices[g] : plan, src ? Side::kTrainer : Side::kEngine,
                                   src ? g : g - ws, bufs, t.get(), opt);
      if (!r.ok()) {
        res.status[g] = r.status();
        return;
      }
      if (absent.count(g)) {
        res.status[g] = absl::UnavailableError("absent");
        absl::SleepFor(timeout);
        return;
      }
      (*r)->Begin({job->version + 1, DeltaBases(modes), true});
      absl::StatusOr<RunStats> run = (*r)->Run(deadline);
      res.status[g] = run.status();
      if (run.ok()) res.run[g] = *run;
      res.stats[g] = (*r)->delta_stats();
      res.allocated_peak[g] = copiers[g]->peak_bytes();
      if (run.ok()) digests[g] = run->digests;
      runners[g] = std::move(*r);
    });
  }
  for (auto& th : threads) th.join();
  DigestSums trainer_sums, engine_sums;
  res.commit = absl::OkStatus();
  for (int g = 0; g < world; ++g) {
    if (!res.status[g].ok()) res.commit = res.status[g];
    AddDigests(digests[g], g < ws ? &trainer_sums : &engine_sums);
  }
  if (res.commit.ok()) res.commit = CompareDigests(plan, trainer_sums, engine_sums);
  if (res.commit.ok() && abort_after) res.commit = absl::AbortedError("a member died");
  if (res.commit.ok()) {
    ++job->version;
    for (int g = 0; g < ws; ++g) runners[g]->Finish(RoundOutcome::kCommitted);
    job->policy->OnCommit(job->version);
  } else {
    for (int g = 0; g < ws; ++g) {
      if (runners[g] != nullptr) runners[g]->Finish(RoundOutcome::kAborted);
    }
    job->policy->OnAbort();
  }
  return res;
}

std::string CheckEngines(const Job& job) {
  OwnedBuffers want = AllocateBuffers(job.plan.dst, 0xEE);
  absl::Status s = ReferenceCopy(job.plan, job.trainer.ptrs, want.ptrs);
  if (!s.ok()) return std::string(s.message());
  for (size_t b = 0; b < want.storage.size(); ++b) {
    for (size_t i = 0; i < want.storage[b].size(); ++i) {
      if (want.storage[b][i] != job.engine.storage[b][i]) {
        return absl::StrCat("engine buffer ", job.plan.dst.buffers[b].name, " byte ", i);
      }
    }
  }
  return "";
}

std::string ChangeAndCommit(Job* job, double fraction, RoundResult* r) {
  Change(job, fraction);
  *r = RunRound(job);
  if (!r->commit.ok()) return absl::StrCat("fraction ", fraction, ": ", r->commit.ToString());
  const std::string wrong = CheckEngines(*job);
  return wrong.empty() ? "" : absl::StrCat("fraction ", fraction, ": ", wrong);
}

int64_t RelayedBytes(const Plan& plan) {
  int64_t bytes = 0;
  for (const Message& m : plan.messages) bytes += m.relay ? m.bytes : 0;
  return bytes;
}

std::string DeadRelayFailsItsDownstream(Job* job, const Message& relay) {
  const int ws = job->plan.src.world_size;
  const int dead = ws + relay.src_rank;
  Change(job, 0.02);
  const absl::Time start = absl::Now();
  RoundResult r = RunRound(job, {dead}, {}, absl::Seconds(2));
  if (absl::Now() - start > absl::Seconds(10)) return "the round with a dead relay took over 10 s";
  if (r.commit.ok()) return "the round with a dead relay committed";
  const absl::Status& st = r.status[ws + relay.dst_rank];
  if (st.ok()) return absl::StrCat("rank ", ws + relay.dst_rank, " did not fail");
  if (!absl::StrContains(st.message(), absl::StrCat("rank ", dead)) &&
      !absl::StrContains(st.message(), absl::StrCat("rank(s) ", dead))) {
    return absl::StrCat("the downstream rank's error does not name rank ", dead, ": ",
                        st.ToString());
  }
  Change(job, 0.02);
  RoundResult again = RunRound(job);
  if (!again.commit.ok()) return absl::StrCat("the next round: ", again.commit.ToString());
  return CheckEngines(*job);
}

}  // namespace testing
}  // namespace refit
