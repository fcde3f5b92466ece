// DeltaWaveOps: the memory-kind half of a delta round, one call per wave.
//
// DeltaRunner (delta_runner.h) runs the same steps for host and device
// members: per wave it counts the changed words of all its messages at
// once, encodes them all, sends every header then every payload, and on
// the engine applies them all; verified rounds digest every byte. Only
// where those bytes live differs: MakeHostWaveOps (host memory, Gloo and
// the in-process transport) does each step on the calling thread;
// exec/delta/cuda's GPU ops do each as a few kernels over every message of
// the wave on the lane's stream (one count pass, one scan, one gather, one
// header upload), ordered with the transport's sends and receives of that
// lane, so the host waits once per wave (for the counts) and never per
// message.
#ifndef REFIT_EXEC_DELTA_WAVE_OPS_H_
#define REFIT_EXEC_DELTA_WAVE_OPS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "exec/delta/delta_codec.h"
#include "exec/transport/transport.h"

namespace refit {

// One contiguous run to digest into sums[slot] (region_digest.h).
struct DigestItem {
  const char* data = nullptr;
  int64_t bytes = 0;
  int element_bytes = 1;
  uint64_t first_key = 0;
  int32_t slot = 0;
};

// One message to count and encode: its current bytes, and the snapshot's
// (null: no snapshot, the message goes dense); in verified rounds, the
// digest runs of its current bytes (each within [cur, cur + bytes)), which
// the count adds to the running digest sums (StartDigests) in the same
// read where it can.
struct EncodeItem {
  const char* cur = nullptr;
  const char* snap = nullptr;
  int64_t bytes = 0;
  int word_bytes = 1;
  absl::Span<const DigestItem> digest;
};

// One received message to apply: its header (ReadDeltaHeader checked it),
// its payload (header.payload_bytes) and the bytes it updates in place
// (header.num_words * header.word_bytes).
struct ApplyItem {
  DeltaHeader header;
  const char* payload = nullptr;
  char* target = nullptr;
};

// Counts a lane may have started and not yet encoded (StartCount).
inline constexpr int kMaxCountsInFlight = 8;

// The device time of a round's count and encode kernels (GPU ops; the
// host ops leave them empty): each count's mask pass (start, end), in
// seconds after `origin` (the host's clock when the first count was
// enqueued), in FinishCount order; each encode from its count's end to its
// payloads and headers written, summed.
struct WaveOpsTimes {
  double encode_seconds = 0;
  absl::Time origin;
  std::vector<std::pair<double, double>> count_windows;
};

// Where a snapshot lives on a device member.
enum class SnapshotMemory { kDevice, kPinnedHost };

class DeltaWaveOps {
 public:
  virtual ~DeltaWaveOps() = default;
  // The memory every pointer passed in is of (pinned host memory counts as
  // device memory for kernels).
  virtual MemoryKind kind() const = 0;
  // True when calls on a lane are ordered with the transport's operations
  // on that lane (a CUDA stream): the runner then posts a wave's payloads
  // and applies without waiting on the host.
  virtual bool OrderedWithTransport() const = 0;

  // Memory of kind() for encodings and headers (RESOURCE_EXHAUSTED when it
  // cannot), and for snapshots (where the ops keep them).
  virtual absl::StatusOr<char*> Allocate(int64_t bytes) = 0;
  virtual void Free(char* p) = 0;
  virtual absl::StatusOr<char*> AllocateSnapshot(int64_t bytes) = 0;
  // Frees what AllocateSnapshot returned; needs nothing of the ops (a
  // snapshot outlives the runner and ops it was made by).
  virtual std::function<void(char*)> SnapshotReleaser() const = 0;

  // Later Count/Encode work of `lane` runs after what is enqueued on the
  // lane's transport stream now (packing, conversions).
  virtual absl::Status AfterLane(int32_t lane) = 0;
  // Waits until everything enqueued on `lane` ran: DEADLINE_EXCEEDED after
  // `deadline`, or the transport's cancellation reason.
  virtual absl::Status Sync(int32_t lane, absl::Time deadline) = 0;
  // Copies `bytes` from src to dst (both of kind()), ordered on `lane`.
  virtual absl::Status Copy(int32_t lane, char* dst, const char* src, int64_t bytes) = 0;
  // Copies `n` headers from `src` (kind()) to the host and waits for them;
  // they must have landed (the transport's WaitWave returned for their
  // receive): the copy does not wait for the lane's later work.
  virtual absl::Status HeadersToHost(int32_t lane, const char* src, DeltaHeader* dst, int64_t n,
                                     absl::Time deadline) = 0;

  // Returns, per item, how many words differ from its snapshot (an item
  // without one: every word). One pass over the wave; waits for it.
  // INVALID_ARGUMENT for a word size other than 1, 2, 4, 8 or bytes that
  // are not whole words. Count = StartCount, then FinishCount.
  absl::StatusOr<std::vector<int64_t>> Count(int32_t lane, absl::Span<const EncodeItem> items,
                                             absl::Time deadline) {
    absl::Status s = StartCount(lane, items, deadline);
    if (!s.ok()) return s;
    return FinishCount(lane, deadline);
  }
  // Starts counting `items` on `lane` (their memory must stay as it is
  // until the encode), so that later waves' counts run while the host
  // waits for, encodes and posts earlier ones; adds their digest runs to
  // the running sums (INVALID_ARGUMENT for a run outside its item or a
  // slot outside StartDigests'). Up to kMaxCountsInFlight
  // counts per lane may be started and not yet encoded; FinishCount takes
  // them oldest first.
  virtual absl::Status StartCount(int32_t lane, absl::Span<const EncodeItem> items,
                                  absl::Time deadline) = 0;
  // Waits for the oldest count started on `lane` and returns it
  // (FAILED_PRECONDITION when none is).
  virtual absl::StatusOr<std::vector<int64_t>> FinishCount(int32_t lane,
                                                           absl::Time deadline) = 0;
  // Writes headers[i] into header_out + 32 i for every item, and item i's
  // payload (its header's encoding) at out[i], for the items of the count
  // FinishCount returned last on `lane`; items whose header is dense are
  // not written (they are sent from `cur`). Ordered on `lane`.
  virtual absl::Status Encode(int32_t lane, absl::Span<const EncodeItem> items,
                              absl::Span<const DeltaHeader> headers,
                              absl::Span<char* const> out, char* header_out,
                              absl::Time deadline) = 0;
  // Applies every item in place. A malformed item (an index out of range
  // or not increasing, a bitmask that disagrees with its count) fails with
  // DATA_LOSS naming names[i] and leaves its target unwritten: at once,
  // after the items before it were applied (host), or from Finish, every
  // target of the call unwritten (device: checked on the lane first).
  virtual absl::Status Apply(int32_t lane, absl::Span<const ApplyItem> items,
                             std::vector<std::string> names, absl::Time deadline) = 0;
  // Waits for every lane (by `deadline`) and returns the first failure an
  // Apply found since the last Finish.
  virtual absl::Status Finish(absl::Time deadline) = 0;
  // Verified rounds. StartDigests zeroes the running digest sums of
  // `slots` slots (region_digest.h) once every lane is idle; AddDigest adds
  // `items`' sums to them, after what is enqueued on `lane` now (device:
  // without waiting, beside the lane's later work); TakeDigests waits for
  // every lane and returns them. INVALID_ARGUMENT for an element size
  // other than 1, 2, 4, 8, a run not of whole elements or a slot out of
  // range.
  virtual absl::Status StartDigests(int32_t slots) = 0;
  virtual absl::Status AddDigest(int32_t lane, absl::Span<const DigestItem> items,
                                 absl::Time deadline) = 0;
  virtual absl::StatusOr<std::vector<uint64_t>> TakeDigests(absl::Time deadline) = 0;
  // The kernels' times since the last call (after Finish: all of them).
  virtual WaveOpsTimes TakeTimes() { return {}; }
  // The digest sums of `items` by slot (`slots` of them), on `lane`; waits.
  absl::StatusOr<std::vector<uint64_t>> Digest(int32_t lane, absl::Span<const DigestItem> items,
                                               int32_t slots, absl::Time deadline) {
    absl::Status s = StartDigests(slots);
    if (s.ok()) s = AddDigest(lane, items, deadline);
    if (!s.ok()) return s;
    return TakeDigests(deadline);
  }
};

// Host memory, every step on the calling thread.
std::unique_ptr<DeltaWaveOps> MakeHostWaveOps();

// Wave ops that pass every step to `inner`, for a wrapper that watches
// some of them (overrides them and calls the base's).
class ForwardingWaveOps : public DeltaWaveOps {
 public:
  explicit ForwardingWaveOps(std::unique_ptr<DeltaWaveOps> inner) : inner_(std::move(inner)) {}
  MemoryKind kind() const override { return inner_->kind(); }
  bool OrderedWithTransport() const override { return inner_->OrderedWithTransport(); }
  absl::StatusOr<char*> Allocate(int64_t bytes) override { return inner_->Allocate(bytes); }
  void Free(char* p) override { inner_->Free(p); }
  absl::StatusOr<char*> AllocateSnapshot(int64_t bytes) override {
    return inner_->AllocateSnapshot(bytes);
  }
  std::function<void(char*)> SnapshotReleaser() const override {
    return inner_->SnapshotReleaser();
  }
  absl::Status AfterLane(int32_t lane) override { return inner_->AfterLane(lane); }
  absl::Status Sync(int32_t lane, absl::Time deadline) override {
    return inner_->Sync(lane, deadline);
  }
  absl::Status Copy(int32_t lane, char* dst, const char* src, int64_t bytes) override {
    return inner_->Copy(lane, dst, src, bytes);
  }
  absl::Status HeadersToHost(int32_t lane, const char* src, DeltaHeader* dst, int64_t n,
                             absl::Time deadline) override {
    return inner_->HeadersToHost(lane, src, dst, n, deadline);
  }
  absl::Status StartCount(int32_t lane, absl::Span<const EncodeItem> items,
                          absl::Time deadline) override {
    return inner_->StartCount(lane, items, deadline);
  }
  absl::StatusOr<std::vector<int64_t>> FinishCount(int32_t lane, absl::Time deadline) override {
    return inner_->FinishCount(lane, deadline);
  }
  absl::Status Encode(int32_t lane, absl::Span<const EncodeItem> items,
                      absl::Span<const DeltaHeader> headers, absl::Span<char* const> out,
                      char* header_out, absl::Time deadline) override {
    return inner_->Encode(lane, items, headers, out, header_out, deadline);
  }
  absl::Status Apply(int32_t lane, absl::Span<const ApplyItem> items,
                     std::vector<std::string> names, absl::Time deadline) override {
    return inner_->Apply(lane, items, std::move(names), deadline);
  }
  absl::Status Finish(absl::Time deadline) override { return inner_->Finish(deadline); }
  absl::Status StartDigests(int32_t slots) override { return inner_->StartDigests(slots); }
  absl::Status AddDigest(int32_t lane, absl::Span<const DigestItem> items,
                         absl::Time deadline) override {
    return inner_->AddDigest(lane, items, deadline);
  }
  absl::StatusOr<std::vector<uint64_t>> TakeDigests(absl::Time deadline) override {
    return inner_->TakeDigests(deadline);
  }
  WaveOpsTimes TakeTimes() override { return inner_->TakeTimes(); }

 private:
  std::unique_ptr<DeltaWaveOps> inner_;
};

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_WAVE_OPS_H_
