// Cancellation: a one-way "cancelled, and why" state shared between the
// thread doing the work and the threads that stop it (a transport's waits and
// its Cancel, a key-value store's Gets and its Cancel).
//
// Thread-safe. It starts not cancelled; the first Cancel sets the reason and
// later ones change nothing. cancelled() is a lock-free check for polling
// loops; status() takes a lock.
#ifndef REFIT_COMMON_CANCELLATION_H_
#define REFIT_COMMON_CANCELLATION_H_

#include <atomic>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace refit {

class Cancellation {
 public:
  // `default_message`: the message of the CANCELLED status that an OK
  // reason given to Cancel becomes.
  explicit Cancellation(std::string default_message = "cancelled")
      : default_message_(std::move(default_message)) {}
  Cancellation(const Cancellation&) = delete;
  Cancellation& operator=(const Cancellation&) = delete;

  // Cancels with `reason` (CANCELLED with the default message when `reason`
  // is OK). Returns true when this call cancelled, false when an earlier one
  // had (its reason stays).
  bool Cancel(const absl::Status& reason);

  // Returns OK while not cancelled, then the first reason.
  absl::Status status() const;

  // Returns true once cancelled; no lock.
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

 private:
  const std::string default_message_;
  std::atomic<bool> cancelled_{false};
  mutable absl::Mutex mu_;
  absl::Status reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace refit

#endif  // REFIT_COMMON_CANCELLATION_H_
