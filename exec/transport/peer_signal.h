// PeerSignal: one word in shared memory that a member writes and the
// members of its host read, for the per-round handshake of the colocated
// data plane (exec/pull/cuda/pull_runner.h): "version N is in place" from a
// sender, "done with version N" (or "failed") from a receiver. A write is
// a store and a futex wake; a wait sleeps on the futex, so a signal costs
// microseconds instead of a socket round trip.
//
// The page is a POSIX shared-memory object (shm_open) with a random name:
// its owner creates it, peers open it by name, and the owner removes the
// name (Unlink) once every peer has opened it; the mapping lives on in
// every process that has it. Members must share /dev/shm (the same IPC
// namespace, as CUDA IPC needs anyway).
//
// The owner's death is noticed by its waiters: a wait checks every
// millisecond whether the owner's process still exists (when its pid is
// visible in the waiter's PID namespace).
#ifndef REFIT_EXEC_TRANSPORT_PEER_SIGNAL_H_
#define REFIT_EXEC_TRANSPORT_PEER_SIGNAL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cancellation.h"

namespace refit {

class PeerSignal {
 public:
  // A value a round publishes: version `round`, failed or not.
  static uint64_t Encode(uint64_t round, bool failed) { return (round << 1) | (failed ? 1 : 0); }

  // Creates this process's signal (value 0) under a fresh name.
  // UNAVAILABLE with the system error when shared memory cannot be created.
  static absl::StatusOr<std::unique_ptr<PeerSignal>> Create();

  // Opens the signal named `name` that process `owner_pid` created (for
  // waiting on it). INVALID_ARGUMENT for a name that is not a refit
  // signal's, UNAVAILABLE with the system error when it cannot be opened
  // (another IPC namespace, already removed).
  static absl::StatusOr<std::unique_ptr<PeerSignal>> Open(const std::string& name,
                                                          int64_t owner_pid);

  ~PeerSignal();  // unmaps; the owner also removes the name if still there
  PeerSignal(const PeerSignal&) = delete;
  PeerSignal& operator=(const PeerSignal&) = delete;

  const std::string& name() const { return name_; }

  // Removes the name (the owner, once every peer opened it). Idempotent.
  void Unlink();

  // Stores `value` and wakes every waiter.
  void Publish(uint64_t value);

  // Returns the first value >= `at_least` seen. Fails with
  // DEADLINE_EXCEEDED at `deadline`, UNAVAILABLE when the owner's process
  // no longer exists, or with `cancel`'s status once it is cancelled (all
  // noticed within about a millisecond); `who` names the owner in errors.
  absl::StatusOr<uint64_t> WaitAtLeast(uint64_t at_least, absl::Time deadline,
                                       const Cancellation& cancel, const std::string& who) const;

 private:
  PeerSignal() = default;
  struct Shared;  // the mapped page
  Shared* shared_ = nullptr;
  std::string name_;
  int64_t owner_pid_ = 0;
  bool owner_ = false;
  bool linked_ = false;
  bool check_owner_ = false;  // the owner is another process, visible here
  int pidfd_ = -1;            // the owner's pidfd, where pidfd_open works
  bool OwnerGone() const;
};

}  // namespace refit

#endif  // REFIT_EXEC_TRANSPORT_PEER_SIGNAL_H_
