// ExecutorRunner and CompositeRunner (see composite_runner.h).
#include "exec/composite_runner.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace refit {

absl::StatusOr<std::unique_ptr<ExecutorRunner>> ExecutorRunner::Create(
    std::unique_ptr<Transport> transport, std::unique_ptr<Copier> copier,
    std::unique_ptr<Executor> executor) {
  if (transport == nullptr) return absl::InvalidArgumentError("transport is null");
  if (executor == nullptr) return absl::InvalidArgumentError("executor is null");
  std::unique_ptr<ExecutorRunner> r(new ExecutorRunner());
  r->transport_ = std::move(transport);
  r->copier_ = std::move(copier);
  r->executor_ = std::move(executor);
  return r;
}

ExecutorRunner::~ExecutorRunner() {
  executor_.reset();  // frees staging through the copier
  copier_.reset();
  transport_.reset();
}

absl::StatusOr<RunStats> ExecutorRunner::Run(absl::Time deadline) {
  return executor_->Run(deadline);
}

void ExecutorRunner::Cancel(const absl::Status& reason) { transport_->Cancel(reason); }

absl::StatusOr<std::unique_ptr<CompositeRunner>> CompositeRunner::Create(
    std::vector<std::unique_ptr<RoundRunner>> parts) {
  if (parts.empty()) return absl::InvalidArgumentError("no round runner to compose");
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("parts[", i, "] is null"));
    }
  }
  std::unique_ptr<CompositeRunner> r(new CompositeRunner());
  r->parts_ = std::move(parts);
  return r;
}

void CompositeRunner::Begin(const RoundStart& round) {
  for (const std::unique_ptr<RoundRunner>& p : parts_) p->Begin(round);
}

void CompositeRunner::Finish(RoundOutcome outcome) {
  for (const std::unique_ptr<RoundRunner>& p : parts_) p->Finish(outcome);
}

absl::StatusOr<RunStats> CompositeRunner::Run(absl::Time deadline) {
  const size_t n = parts_.size();
  std::vector<absl::StatusOr<RunStats>> results(n, absl::UnknownError("not run"));
  absl::Mutex mu;
  absl::Status first;  // the first failure, which cancelled the others
  auto run = [&](size_t i) {
    results[i] = parts_[i]->Run(deadline);
    if (results[i].ok()) return;
    bool cancel = false;
    {
      absl::MutexLock l(&mu);
      if (first.ok()) {
        first = results[i].status();
        cancel = true;
      }
    }
    if (!cancel) return;
    for (size_t k = 0; k < n; ++k) {
      if (k != i) parts_[k]->Cancel(results[i].status());
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i) threads.emplace_back(run, i);
  run(0);
  for (std::thread& t : threads) t.join();
  if (!first.ok()) return first;
  RunStats total;
  for (const absl::StatusOr<RunStats>& r : results) {
    total.bytes_sent += r->bytes_sent;
    total.bytes_received += r->bytes_received;
    total.waves += r->waves;
    total.seconds = std::max(total.seconds, r->seconds);
    total.delta_messages += r->delta_messages;
    total.dense_messages += r->dense_messages;
    total.digest_seconds = std::max(total.digest_seconds, r->digest_seconds);
    // Digest parts add (round_digest.h): each part digests its own pairs.
    for (const auto& [key, sum] : r->digests) total.digests[key] += sum;
    // The parts run at once, each holding its own staging.
    total.peak_staging_bytes += r->peak_staging_bytes;
  }
  return total;
}

void CompositeRunner::Cancel(const absl::Status& reason) {
  for (const std::unique_ptr<RoundRunner>& p : parts_) p->Cancel(reason);
}

}  // namespace refit
