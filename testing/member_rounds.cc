// Rounds of every rank of a plan as members run them: see member_rounds.h.
#include "testing/member_rounds.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/delta/round_digest.h"
#include "exec/transport/kv_store.h"

namespace refit {
namespace testing {

MemberRounds::MemberRounds(Plan plan, MemberKit kit, bool delta)
    : plan_(std::move(plan)),
      kit_(std::move(kit)),
      delta_(delta),
      ws_(plan_.src.world_size),
      world_(plan_.src.world_size + plan_.dst.world_size),
      policy_(plan_.dst.world_size) {}

absl::StatusOr<std::unique_ptr<MemberRounds>> MemberRounds::Create(Plan plan, MemberKit kit,
                                                                   bool delta) {
  std::unique_ptr<MemberRounds> r(new MemberRounds(std::move(plan), std::move(kit), delta));
  const Plan& p = r->plan_;
  // The registered trainer buffers (a converted plan's scratch buffers come
  // last; each trainer's runner makes its own).
  size_t registered = 0;
  while (registered < p.src.buffers.size() && !p.src.buffers[registered].scratch) ++registered;
  r->trainer_ = AllocateBuffers(p.src);
  FillPattern(p.src, r->trainer_.ptrs, {-1, 1});
  r->trainer_.storage.resize(registered);
  r->trainer_.ptrs.resize(registered);
  r->snapshots_.resize(r->ws_);
  r->trainer_mem_.assign(p.src.buffers.size(), nullptr);
  r->engine_mem_.assign(p.dst.buffers.size(), nullptr);
  MemberRounds* self = r.get();
  self->OnEveryRank([self, registered](int32_t g) {
    const bool src = g < self->ws_;
    const SideLayout& side = src ? self->plan_.src : self->plan_.dst;
    const int32_t rank = src ? g : g - self->ws_;
    for (size_t b = 0; b < side.buffers.size(); ++b) {
      if (side.buffers[b].rank != rank || (src && b >= registered)) continue;
      const int64_t n = side.buffers[b].byte_size;
      char* m = self->kit_.alloc(n + 1);
      if (src) {
        self->kit_.write(m, self->trainer_.storage[b].data(), n);
        self->trainer_mem_[b] = m;
      } else {
        const std::vector<uint8_t> ee(n, 0xEE);
        self->kit_.write(m, ee.data(), n);
        self->engine_mem_[b] = m;
      }
    }
  });
  REFIT_RETURN_IF_ERROR(r->Connect());
  return r;
}

MemberRounds::~MemberRounds() {
  OnEveryRank([this](int32_t g) {
    if (static_cast<size_t>(g) < runners_.size()) runners_[g].reset();
    const bool src = g < ws_;
    const SideLayout& side = src ? plan_.src : plan_.dst;
    std::vector<char*>& mem = src ? trainer_mem_ : engine_mem_;
    for (size_t b = 0; b < side.buffers.size(); ++b) {
      if (side.buffers[b].rank == (src ? g : g - ws_) && mem[b] != nullptr) kit_.free(mem[b]);
    }
  });
}

void MemberRounds::OnEveryRank(const std::function<void(int32_t)>& fn) {
  std::vector<std::thread> threads;
  for (int32_t g = 0; g < world_; ++g) {
    threads.emplace_back([this, &fn, g] {
      if (kit_.use) kit_.use(g);
      fn(g);
    });
  }
  for (std::thread& t : threads) t.join();
}

absl::Status MemberRounds::Connect() {
  // The old runners go first (their transports fail their ranks).
  OnEveryRank([this](int32_t g) {
    if (static_cast<size_t>(g) < runners_.size()) runners_[g].reset();
  });
  runners_.clear();
  runners_.resize(world_);
  delta_runners_.assign(world_, nullptr);
  std::vector<DataPlaneParts> parts = kit_.parts(world_, plan_.options.num_lanes);
  if (static_cast<int32_t>(parts.size()) != world_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the kit made ", parts.size(), " members' parts for ", world_, " ranks"));
  }
  InMemoryKvStore store;
  std::vector<absl::Status> st(world_);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  OnEveryRank([&](int32_t g) {
    const bool src = g < ws_;
    MemberSlice m;
    m.plan = &plan_;
    m.side = src ? Side::kTrainer : Side::kEngine;
    m.rank = src ? g : g - ws_;
    m.buffers = src ? trainer_mem_ : engine_mem_;
    m.global_rank = g;
    m.global_world = world_;
    m.num_lanes = plan_.options.num_lanes;
    DataPlaneParts p = parts[g];
    p.delta = delta_;
    if (src) p.delta_options.snapshot = &snapshots_[g];
    if (delta_) {
      absl::StatusOr<std::unique_ptr<DeltaRunner>> r = MakeDeltaMemberRunner(m, p, &store);
      st[g] = r.status();
      if (r.ok()) {
        delta_runners_[g] = r->get();
        runners_[g] = std::move(*r);
      }
    } else {
      absl::StatusOr<std::unique_ptr<RoundRunner>> r = MakeMemberRunner(m, p, &store, deadline);
      st[g] = r.status();
      if (r.ok()) runners_[g] = std::move(*r);
    }
  });
  for (int32_t g = 0; g < world_; ++g) {
    if (!st[g].ok()) return AnnotateStatus(st[g], absl::StrCat("global rank ", g));
  }
  return absl::OkStatus();
}

MemberRound MemberRounds::Run(absl::Duration timeout, int32_t stopped, RankStop how) {
  MemberRound res;
  res.status.assign(world_, absl::OkStatus());
  res.run.resize(world_);
  res.delta.resize(world_);
  const std::vector<EngineDeltaMode> modes = policy_.Announce(delta_);
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  OnEveryRank([&](int32_t g) {
    RoundRunner& r = *runners_[g];
    r.Begin({version_ + 1, DeltaBases(modes), delta_});
    if (g == stopped && how == RankStop::kStalled) {
      res.status[g] = absl::UnavailableError(absl::StrCat("global rank ", g, " stalled"));
      return;
    }
    if (g == stopped) r.Cancel(absl::AbortedError(absl::StrCat("global rank ", g, " stopped")));
    absl::StatusOr<RunStats> run = r.Run(deadline);
    res.status[g] = run.status();
    if (run.ok()) res.run[g] = std::move(*run);
    if (delta_runners_[g] != nullptr) res.delta[g] = delta_runners_[g]->delta_stats();
  });
  res.took = absl::Now() - start;
  DigestSums trainer_sums, engine_sums;
  for (int32_t g = 0; g < world_; ++g) {
    if (!res.status[g].ok() && res.commit.ok()) res.commit = res.status[g];
    AddDigests(res.run[g].digests, g < ws_ ? &trainer_sums : &engine_sums);
  }
  if (res.commit.ok() && delta_) res.commit = CompareDigests(plan_, trainer_sums, engine_sums);
  const RoundOutcome outcome = res.commit.ok() ? RoundOutcome::kCommitted : RoundOutcome::kAborted;
  for (std::unique_ptr<RoundRunner>& r : runners_) r->Finish(outcome);
  if (res.commit.ok()) {
    ++version_;
    policy_.OnCommit(version_);
    return res;
  }
  policy_.OnAbort();
  bool failed = false;
  for (const absl::Status& s : res.status) failed = failed || !s.ok();
  if (failed) {
    const absl::Status c = Connect();
    if (!c.ok()) res.commit = AnnotateStatus(c, "rebuilding the runners after the round");
  }
  return res;
}

void MemberRounds::Change(double fraction) {
  std::bernoulli_distribution pick(fraction);
  for (size_t b = 0; b < trainer_.storage.size(); ++b) {
    std::vector<uint8_t>& bytes = trainer_.storage[b];
    for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
      if (pick(rng_)) bytes[i] ^= static_cast<uint8_t>(1 + rng_() % 127);
    }
  }
  OnEveryRank([this](int32_t g) {
    for (size_t b = 0; g < ws_ && b < trainer_.storage.size(); ++b) {
      if (plan_.src.buffers[b].rank == g) {
        kit_.write(trainer_mem_[b], trainer_.storage[b].data(),
                   static_cast<int64_t>(trainer_.storage[b].size()));
      }
    }
  });
}

int32_t MemberRounds::EngineGlobal(size_t b) const { return ws_ + plan_.dst.buffers[b].rank; }

std::string MemberRounds::CheckEngines() {
  OwnedBuffers want = AllocateBuffers(plan_.dst, 0xEE);
  const absl::Status s = ReferenceCopy(plan_, trainer_.ptrs, want.ptrs);
  if (!s.ok()) return s.ToString();
  std::vector<std::string> wrong(plan_.dst.buffers.size());
  OnEveryRank([&](int32_t g) {
    for (size_t b = 0; b < want.storage.size(); ++b) {
      if (EngineGlobal(b) != g) continue;
      std::vector<uint8_t> got(want.storage[b].size());
      kit_.read(got.data(), engine_mem_[b], static_cast<int64_t>(got.size()));
      for (size_t i = 0; i < got.size() && wrong[b].empty(); ++i) {
        if (got[i] != want.storage[b][i]) {
          wrong[b] = absl::StrCat("engine rank ", plan_.dst.buffers[b].rank, " buffer ",
                                  plan_.dst.buffers[b].name, " byte ", i, ": ",
                                  static_cast<int>(got[i]), " where the reference has ",
                                  static_cast<int>(want.storage[b][i]));
        }
      }
    }
  });
  for (const std::string& w : wrong) {
    if (!w.empty()) return w;
  }
  return "";
}

void MemberRounds::FlipEngineByte(int32_t buffer, int64_t offset, uint8_t bits) {
  OnEveryRank([&](int32_t g) {
    if (g != EngineGlobal(buffer)) return;
    uint8_t x = 0;
    kit_.read(&x, engine_mem_[buffer] + offset, 1);
    x ^= bits;
    kit_.write(engine_mem_[buffer] + offset, &x, 1);
  });
}

}  // namespace testing
}  // namespace refit
