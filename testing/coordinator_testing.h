// Helpers for the Coordinator's tests: registrations, a blocking AwaitPlan,
// a recording round stream. Test-only.
#ifndef REFIT_TESTING_COORDINATOR_TESTING_H_
#define REFIT_TESTING_COORDINATOR_TESTING_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "proto/protocol_version.h"
#include "server/coordinator.h"
#include "testing/name_matching_plan.h"

namespace refit {
namespace coordinator_testing {

inline absl::Time In(absl::Duration d) { return absl::Now() + d; }

inline v1::Registration Reg(v1::Side side, const std::string& engine, int rank, int world,
                     const std::vector<std::string>& buffers = {"w"}) {
  v1::Registration r;
  r.set_protocol_version(kProtocolVersion);
  auto* id = r.mutable_identity();
  id->set_job("job");
  id->set_side(side);
  id->set_engine_id(engine);
  id->set_rank(rank);
  id->set_world_size(world);
  id->set_host_id("host0");
  for (const auto& name : buffers) {
    auto* b = r.add_buffers();
    b->set_name(name);
    b->add_shape(4);
    b->set_dtype(3);  // F32
    b->set_byte_size(16);
  }
  return r;
}

inline Coordinator::Options TestOptions() {
  Coordinator::Options o;
  o.plan_function = NameMatchingPlan;
  o.heartbeat_timeout = absl::Seconds(30);
  o.plan_settle = absl::Milliseconds(1);
  o.plan_settle_max = absl::Milliseconds(20);
  o.tick = absl::Milliseconds(5);
  return o;
}

inline std::unique_ptr<Coordinator> Make(Coordinator::Options o = TestOptions()) {
  auto c = Coordinator::Create(std::move(o));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// The member secret the last Register of `member_id` returned.
inline std::string& Secret(const std::string& member_id) {
  static auto* secrets = new std::map<std::string, std::string>();
  return (*secrets)[member_id];
}

// Waits (up to `wait` + 5 s) for member `id`'s plan of at least `min_epoch`.
inline absl::StatusOr<v1::AwaitPlanResponse> AwaitPlan(Coordinator& c, const std::string& id,
                                                absl::Duration wait = absl::Seconds(5),
                                                int64_t min_epoch = 0) {
  v1::AwaitPlanRequest req;
  req.set_member_id(id);
  req.set_min_epoch(min_epoch);
  req.set_member_secret(Secret(id));
  auto n = std::make_shared<absl::Notification>();
  auto result = std::make_shared<absl::StatusOr<v1::AwaitPlanResponse>>(
      absl::DeadlineExceededError("test: no answer"));
  c.AwaitPlan(req, In(wait), [n, result](absl::StatusOr<v1::AwaitPlanResponse> r) {
    *result = std::move(r);
    n->Notify();
  });
  n->WaitForNotificationWithTimeout(wait + absl::Seconds(5));
  return *result;
}

// A round stream that records what it is sent.
class FakeStream : public RoundStream {
 public:
  void Push(SharedRoundEvent event) override {
    absl::MutexLock l(&mu_);
    events_.push_back(*event);
  }
  void End(absl::Status status) override {
    absl::MutexLock l(&mu_);
    ended_ = status;
  }
  // Waits up to 5 s for an event of `kind`; returns it (KIND_UNSPECIFIED when
  // none came).
  v1::RoundEvent WaitFor(v1::RoundEvent::Kind kind) {
    absl::MutexLock l(&mu_);
    auto has = [&]() {
      for (const auto& e : events_) {
        if (e.kind() == kind) return true;
      }
      return false;
    };
    mu_.AwaitWithTimeout(absl::Condition(&has), absl::Seconds(5));
    for (const auto& e : events_) {
      if (e.kind() == kind) return e;
    }
    return v1::RoundEvent();
  }
  std::optional<absl::Status> ended() {
    absl::MutexLock l(&mu_);
    return ended_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::RoundEvent> events_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> ended_ ABSL_GUARDED_BY(mu_);
};

inline std::string Register(Coordinator& c, const v1::Registration& reg) {
  auto r = c.Register(reg);
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) Secret(r->member_id()) = r->member_secret();
  return r.ok() ? r->member_id() : "";
}

// Registers a trainer and engine A, attaches their streams and waits for the
// plan; returns the member ids.
inline std::vector<std::string> ReadyForRounds(Coordinator& c, FakeStream& ts, FakeStream& es) {
  const std::string t = Register(c, Reg(v1::SIDE_TRAINER, "", 0, 1));
  const std::string e = Register(c, Reg(v1::SIDE_ENGINE, "A", 0, 1));
  EXPECT_TRUE(AwaitPlan(c, t).ok());
  EXPECT_TRUE(c.Watch(t, Secret(t), &ts).ok());
  EXPECT_TRUE(c.Watch(e, Secret(e), &es).ok());
  return {t, e};
}

inline v1::ReportRequest Done(const std::string& id, int64_t version, bool ok = true) {
  v1::ReportRequest r;
  r.set_member_id(id);
  r.set_member_secret(Secret(id));
  r.set_version(version);
  r.set_ok(ok);
  r.set_bytes(16);
  r.set_seconds(0.5);
  if (!ok) r.set_reason("copy failed");
  return r;
}

inline v1::StartRoundRequest Start(const std::string& id, int64_t version) {
  v1::StartRoundRequest r;
  r.set_member_id(id);
  r.set_member_secret(Secret(id));
  r.set_version(version);
  return r;
}

}  // namespace coordinator_testing
}  // namespace refit

#endif  // REFIT_TESTING_COORDINATOR_TESTING_H_
