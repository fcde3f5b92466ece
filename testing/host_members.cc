// Host-memory test members (see host_members.h).
#include "testing/host_members.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "mapping/parallel_spec.h"
#include "server/default_plan.h"

namespace refit::testing {
namespace {

// The members' meeting points of RunHostRounds: Meet returns once every
// member still taking part arrived (false at `deadline`); Leave drops a
// member that stopped.
class Meetings {
 public:
  explicit Meetings(int members) : members_(members) {}
  bool Meet(absl::Time deadline) {
    absl::MutexLock l(&mu_);
    const int64_t generation = generation_;
    ++arrived_;
    ReleaseIfAll();
    auto passed = [this, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return generation_ != generation;
    };
    return mu_.AwaitWithDeadline(absl::Condition(&passed), deadline);
  }
  void Leave() {
    absl::MutexLock l(&mu_);
    --members_;
    ReleaseIfAll();
  }

 private:
  void ReleaseIfAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (arrived_ > 0 && arrived_ >= members_) {
      arrived_ = 0;
      ++generation_;
    }
  }
  absl::Mutex mu_;
  int members_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

HostMember MemberOf(const std::string& target, const std::string& model, Side side,
                    const std::string& convention, const std::string& engine_id, int32_t rank) {
  HostMember m;
  m.options.connection.target = target;
  m.options.model = model;
  m.options.side = side;
  m.options.convention = convention;
  m.options.engine_id = engine_id;
  m.options.rank = rank;
  return m;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RefitServer>> StartHostRefitd(bool delta, PlannerOptions planner,
                                                            double host_link_gbps) {
  RefitServer::Options so;
  DefaultPlanOptions o;
  o.planner = planner;
  REFIT_ASSIGN_OR_RETURN(o.host_delta,
                         HostDeltaFromFlags(host_link_gbps, HostDeltaModel().codec_gbps));
  so.coordinator.plan_function = DefaultPlanFunction(std::move(o));
  so.coordinator.delta = delta;
  return RefitServer::Start(std::move(so));
}

std::vector<HostMember> TrainerAndEngine(const std::string& target, const std::string& model) {
  std::vector<HostMember> members;
  members.push_back(MemberOf(target, model, Side::kTrainer, "megatron:tp=1", "", 0));
  members.push_back(MemberOf(target, model, Side::kEngine, "vllm:tp=1", "A", 0));
  return members;
}

absl::StatusOr<std::vector<HostMember>> HostJob(const std::string& target,
                                                const std::string& model,
                                                const std::string& trainer,
                                                const std::vector<std::string>& engines) {
  std::vector<HostMember> members;
  REFIT_ASSIGN_OR_RETURN(TrainerSpec t, ParseTrainerSpec(trainer));
  for (int32_t r = 0; r < t.world_size(); ++r) {
    members.push_back(MemberOf(target, model, Side::kTrainer, trainer, "", r));
  }
  for (size_t e = 0; e < engines.size(); ++e) {
    REFIT_ASSIGN_OR_RETURN(EngineSpec spec, ParseEngineSpec(engines[e]));
    const std::string id(1, static_cast<char>('A' + e));
    for (int32_t r = 0; r < spec.world_size(); ++r) {
      members.push_back(MemberOf(target, model, Side::kEngine, engines[e], id, r));
    }
  }
  return members;
}

absl::Status JoinHostMembers(std::vector<HostMember>& members,
                             const std::function<DataPlaneOptions(size_t)>& data_plane,
                             absl::Time deadline) {
  for (size_t i = 0; i < members.size(); ++i) {
    HostMember& n = members[i];
    const std::string who = absl::StrCat("member ", i);
    REFIT_ASSIGN_OR_RETURN(std::vector<LocalBuffer> want,
                           AnnotateStatus(ExpectedBuffers(n.options), who));
    std::map<std::string, BufferRef> refs;
    for (const LocalBuffer& b : want) {
      std::vector<char>& m = n.memory[b.name];
      m.assign(b.byte_size, static_cast<char>(0xEE));
      refs[b.name] = BufferRef{m.data(), b.byte_size};
    }
    REFIT_ASSIGN_OR_RETURN(
        n.member,
        AnnotateStatus(Member::Join(n.options, std::move(refs), data_plane(i), deadline), who));
  }
  return absl::OkStatus();
}

absl::Status HostRounds::FirstFailure() const {
  for (size_t v = 0; v < status.size(); ++v) {
    for (size_t i = 0; i < status[v].size(); ++i) {
      if (!status[v][i].ok()) {
        return AnnotateStatus(status[v][i], absl::StrCat("round ", v + 1, ", member ", i));
      }
    }
  }
  return absl::OkStatus();
}

HostRounds RunHostRounds(std::vector<HostMember>& members, int64_t rounds,
                         const std::function<absl::Status(const Member&, int64_t)>& fill,
                         const std::function<absl::Status(const Member&, int64_t)>& check,
                         absl::Time deadline) {
  HostRounds out;
  const size_t n = members.size();
  out.status.assign(rounds, std::vector<absl::Status>(n, absl::OkStatus()));
  out.stats.assign(rounds, std::vector<RunStats>(n));
  Meetings meetings(static_cast<int>(n));
  // One member's rounds; the first failure ends them.
  auto run = [&](size_t i) {
    Member& m = *members[i].member;
    const bool trainer = members[i].options.side == Side::kTrainer;
    const absl::Status prepared = m.Prepare(deadline);
    for (int64_t v = 1; v <= rounds; ++v) {
      absl::Status& s = out.status[v - 1][i];
      s = prepared;
      if (s.ok() && trainer) s = fill(m, v);
      if (s.ok() && !meetings.Meet(deadline)) s = absl::DeadlineExceededError("meeting the members");
      if (s.ok() && i == 0) s = m.StartRound(v, deadline);
      absl::StatusOr<int64_t> got = s.ok() ? m.WaitForRound(deadline) : s;
      if (got.ok() && *got != v) {
        got = absl::InternalError(absl::StrCat("refitd announced round ", *got));
      }
      absl::StatusOr<RunStats> r = got.ok() ? m.RunRound(v, deadline) : got.status();
      if (r.ok()) out.stats[v - 1][i] = *r;
      s = r.status();
      if (s.ok() && !trainer) s = check(m, v);
      if (s.ok() && !meetings.Meet(deadline)) s = absl::DeadlineExceededError("meeting the members");
      if (!s.ok()) return;
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      run(i);
      meetings.Leave();
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

}  // namespace refit::testing
