// StagedBuffers: an engine member's staging copy of its own buffers, for
// staged rounds (DataPlaneOptions::staging). The member's data plane runs
// its plan slice with every buffer address redirected to the staging copy
// of the same size, so a round arrives while the engine keeps serving from
// its live buffers; Apply then writes the live buffers from staging in one
// copy per buffer (the engine's pause). Staging starts as a copy of the
// live bytes, so bytes the plan never writes (padding) stay equal, and
// after an Apply both hold the same version; Reset copies live into
// staging again after a round that aborted before its apply.
//
// A round that changed few words (a delta round) pauses for those words
// only where the memory can list them (device staging): FindChanged,
// while the engine still serves, compares staging with live and marks the
// 32-byte sectors that differ; ApplyChanged, the pause, writes just those.
//
// Staging memory comes from StagingMemory: a device member's staging lies
// in device memory up to a budget and in pinned host memory past it
// (StagedBuffers::Create says how many bytes of each); host members' in
// host memory.
//
//   REFIT_ASSIGN_OR_RETURN(auto s, StagedBuffers::Create(live, sizes, HostStagingMemory(), -1));
//   ... run the round into s->staging() ...
//   REFIT_ASSIGN_OR_RETURN(double pause, s->Apply(deadline));
//   // or, for a delta round:
//   REFIT_ASSIGN_OR_RETURN(bool listed, s->FindChanged(deadline));
//   REFIT_ASSIGN_OR_RETURN(double pause, listed ? s->ApplyChanged(deadline) : s->Apply(deadline));
#ifndef REFIT_CLIENT_STAGED_BUFFERS_H_
#define REFIT_CLIENT_STAGED_BUFFERS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace refit {

// One staged buffer: its live bytes and their staging copy.
struct StagedPair {
  char* live = nullptr;
  const char* staging = nullptr;
  int64_t bytes = 0;
};

// Where staging lies and how it is copied to and from the live buffers.
class StagingMemory {
 public:
  virtual ~StagingMemory() = default;
  // `bytes` of staging: of the fast kind (device memory on a GPU member)
  // when `fast`, else of the overflow kind (pinned host memory).
  // RESOURCE_EXHAUSTED when there is none.
  virtual absl::StatusOr<char*> Allocate(int64_t bytes, bool fast) = 0;
  virtual void Free(char* p, bool fast) = 0;
  // Enqueues a copy of `bytes` from `src` to `dst` (staging or live
  // memory); Sync waits for every copy enqueued (DEADLINE_EXCEEDED after
  // `deadline`, or the device's error).
  virtual absl::Status Copy(char* dst, const char* src, int64_t bytes) = 0;
  virtual absl::Status Sync(absl::Time deadline) = 0;
  // Enqueues, after the copies enqueued so far, a comparison of every
  // pair's staging with its live bytes that lists the words (or the blocks
  // holding them) in which they differ; returns false when this memory
  // lists none (host memory, or no room for the list: the pairs are then
  // copied whole), else true. The device's error.
  virtual absl::StatusOr<bool> FindChanged(absl::Span<const StagedPair> pairs) {
    (void)pairs;
    return false;
  }
  // Enqueues the write of exactly the words the last FindChanged listed
  // (and the copy of what it could not list) into the live bytes;
  // FAILED_PRECONDITION when FindChanged listed nothing since.
  virtual absl::Status WriteChanged() {
    return absl::FailedPreconditionError("staging memory lists no changed words");
  }
};

// Host memory (64-byte aligned), copied with memcpy on the calling thread.
std::unique_ptr<StagingMemory> HostStagingMemory();

// The device (fast) staging budget of an engine rank holding
// `weight_bytes`: `budget_bytes` when >= 0, else `budget_share` of the
// weight bytes; -1 (no bound) for a share of 1 or more.
int64_t StagingBudget(int64_t budget_bytes, double budget_share, int64_t weight_bytes);

// Whether a buffer of `bytes` is staged in fast memory when `fast_so_far`
// bytes before it (in buffer order) are: while it fits `fast_budget` (-1:
// always).
inline bool StagedFast(int64_t fast_budget, int64_t fast_so_far, int64_t bytes) {
  return fast_budget < 0 || fast_so_far + bytes <= fast_budget;
}

class StagedBuffers {
 public:
  // Staging for the buffers `live` (null entries: buffers of other ranks,
  // left null in staging()), of `bytes[i]` each, copied from them: each
  // buffer in order that still fits within `fast_budget` bytes (-1: all of
  // them) in fast memory, the others in overflow memory. INVALID_ARGUMENT when the
  // two lists differ in length or a size is negative; the memory's error.
  static absl::StatusOr<std::unique_ptr<StagedBuffers>> Create(
      std::vector<char*> live, std::vector<int64_t> bytes,
      std::unique_ptr<StagingMemory> memory, int64_t fast_budget, absl::Time deadline);
  ~StagedBuffers();

  // The staging address of each buffer, indexed like `live`; the live
  // buffers and their sizes as given.
  const std::vector<char*>& staging() const { return staging_; }
  const std::vector<char*>& live() const { return live_; }
  const std::vector<int64_t>& bytes() const { return bytes_; }
  // The bytes staged in fast and in overflow memory.
  int64_t fast_bytes() const { return fast_bytes_; }
  int64_t overflow_bytes() const { return overflow_bytes_; }

  // Writes every live buffer from its staging and waits; returns the
  // seconds it took. The memory's error (then the live buffers may hold
  // part of the round).
  absl::StatusOr<double> Apply(absl::Time deadline);
  // Writes every staging buffer from its live buffer again and waits (a
  // round that aborted before its apply left staging ahead of live).
  absl::Status Reset(absl::Time deadline);

  // Lists, and waits for the listing of, the words (device memory: 32-byte
  // sectors) in which each buffer in fast memory differs from its live
  // buffer (the engine keeps serving: live is only read). Returns false
  // when the memory lists none (then Apply copies); the memory's error.
  // Staging must not change until ApplyChanged.
  absl::StatusOr<bool> FindChanged(absl::Time deadline);
  // The pause of a round FindChanged listed: writes the listed words of the
  // fast buffers and copies the overflow buffers whole, and waits; returns
  // the seconds it took. FAILED_PRECONDITION when FindChanged listed
  // nothing since the last Apply, ApplyChanged or Reset; the memory's
  // error (then the live buffers may hold part of the round).
  absl::StatusOr<double> ApplyChanged(absl::Time deadline);

 private:
  StagedBuffers() = default;
  absl::Status CopyAll(bool to_live, absl::Time deadline);

  std::unique_ptr<StagingMemory> memory_;
  std::vector<char*> live_;
  std::vector<char*> staging_;
  std::vector<int64_t> bytes_;
  std::vector<bool> fast_;
  bool listed_ = false;  // FindChanged listed the words of the round in staging
  int64_t fast_bytes_ = 0;
  int64_t overflow_bytes_ = 0;
};

}  // namespace refit

#endif  // REFIT_CLIENT_STAGED_BUFFERS_H_
