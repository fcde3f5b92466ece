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
// Staging memory comes from StagingMemory: a device member's staging lies
// in device memory up to a budget and in pinned host memory past it
// (StagedBuffers::Create says how many bytes of each); host members' in
// host memory.
//
//   REFIT_ASSIGN_OR_RETURN(auto s, StagedBuffers::Create(live, sizes, HostStagingMemory(), -1));
//   ... run the round into s->staging() ...
//   REFIT_ASSIGN_OR_RETURN(double pause, s->Apply(deadline));
#ifndef REFIT_CLIENT_STAGED_BUFFERS_H_
#define REFIT_CLIENT_STAGED_BUFFERS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace refit {

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
};

// Host memory (64-byte aligned), copied with memcpy on the calling thread.
std::unique_ptr<StagingMemory> HostStagingMemory();

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

 private:
  StagedBuffers() = default;
  absl::Status CopyAll(bool to_live, absl::Time deadline);

  std::unique_ptr<StagingMemory> memory_;
  std::vector<char*> live_;
  std::vector<char*> staging_;
  std::vector<int64_t> bytes_;
  std::vector<bool> fast_;
  int64_t fast_bytes_ = 0;
  int64_t overflow_bytes_ = 0;
};

}  // namespace refit

#endif  // REFIT_CLIENT_STAGED_BUFFERS_H_
