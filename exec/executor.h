// Executor: runs one rank's part of a Plan against the buffers that rank
// registered, over a Transport.
//
// Created once per plan: it compiles every message of the rank into copy
// tasks (copy_program.h), assigns waves to lanes (wave.lane modulo the
// lane count) and allocates staging once per lane (the rank's peak over the
// lane's waves; the total never exceeds the plan's staging budget). Each
// Run() executes all of the rank's waves in plan order: wave r+1 is packed
// while wave r is in flight on another lane (at most one wave per lane in
// flight); messages that are one contiguous buffer range go straight from /
// into the buffer (zero copy); received bytes are unpacked into the
// destination buffers in place — the executor never allocates or moves a
// registered buffer.
//
// Relays (plan.h): an engine rank also sends the relay messages it
// forwards, packed from (or, contiguous, sent straight from) its own
// buffers; before a wave with such sends, its earlier waves on every lane
// complete (their bytes are in place), and waves are not queued ahead.
#ifndef REFIT_EXEC_EXECUTOR_H_
#define REFIT_EXEC_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "exec/convert/copier.h"
#include "exec/program/copy_program.h"
#include "exec/convert/conversion_stage.h"
#include "exec/program/plan_side.h"
#include "exec/run_stats.h"
#include "exec/transport/transport.h"
#include "layout/side.h"
#include "plan/plan.h"

namespace refit {

struct ExecutorOptions {
  // Lanes used (<= transport->num_lanes()); 0 = the transport's.
  int32_t num_lanes = 0;
  // Per-segment checksums: per segment, the sender hashes what it sends
  // and the receiver hashes what it wrote into its buffer; the hashes are
  // exchanged through the transport after the last wave and compared.
  // (Verified rounds, refitd --verify_every, are the delta runner's
  // digests instead: exec/delta/round_digest.h.)
  bool segment_checksums = false;
  // Device copies (staging in device memory); nullptr = host memcpy
  // (MakeHostCopier).
  Copier* copier = nullptr;
  // Peers (global ranks) whose messages another data plane moves (the
  // colocated pull path, exec/composite_runner.h): the executor leaves them
  // out. Empty = none. A trainer rank with conversions cannot leave peers
  // out (Create fails with FAILED_PRECONDITION).
  std::function<bool(int32_t)> exclude_peer;
};

class Executor {
 public:
  // `buffers[b]` is the address of the side's buffer b (SideLayout::buffers
  // index); only this rank's buffers are read (others may be null). The
  // transport's global rank must be `rank` (source) or
  // plan.src.world_size + `rank` (destination); it must outlive the
  // executor. Fails with INVALID_ARGUMENT if a needed buffer is missing or
  // the plan is inconsistent (naming the tensor), FAILED_PRECONDITION if
  // the transport does not match (rank, memory kind, lanes),
  // RESOURCE_EXHAUSTED if the rank's staging would exceed the plan's
  // budget. With options.exclude_peer, the transport only needs to reach
  // the other peers.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(
      const Plan& plan, Side side, int32_t rank,
      std::vector<char*> buffers, Transport* transport,
      ExecutorOptions options = {});

  ~Executor();

  // Runs every wave of the rank once. Fails with the transport's error
  // (DEADLINE_EXCEEDED / ABORTED / UNAVAILABLE naming the peer) — never
  // later than `deadline` plus the transport's teardown margin — or
  // DATA_LOSS naming the tensor and both ranks when the segment checksums find a
  // mismatch. After a failure the executor must not be run again.
  // On a source rank with conversions (plan.conversions), they run first:
  // INVALID_ARGUMENT naming the tensor and rank for a NaN or infinity in a
  // quantized weight, or the transport's error from the amax exchange.
  absl::StatusOr<RunStats> Run(absl::Time deadline);

  // Staging bytes allocated per lane.
  const std::vector<int64_t>& staging_per_lane() const { return staging_; }

 private:
  struct MsgWork {
    int32_t message = 0;  // index into plan.messages
    int32_t peer = 0;     // global rank
    int64_t bytes = 0;
    bool direct = false;        // zero copy
    char* direct_ptr = nullptr;  // when direct
    int64_t staging_offset = 0;  // otherwise
    std::vector<CopyTask> tasks;  // pack (send) or unpack (recv)
  };
  struct WaveWork {
    int32_t wave = 0;
    int32_t lane = 0;
    std::vector<MsgWork> sends;
    std::vector<MsgWork> recvs;
    bool relays = false;  // the rank forwards bytes (relay sends) in it
  };
  Executor() = default;
  absl::StatusOr<RunStats> RunWaves(absl::Time deadline);
  // Where message m of wave w is sent from / received into: the buffer
  // (zero copy) or the lane's staging.
  char* MessagePtr(const WaveWork& w, const MsgWork& m) const {
    return m.direct ? m.direct_ptr : staging_ptr_[w.lane] + m.staging_offset;
  }
  absl::Status Pack(const WaveWork& w);
  absl::Status Unpack(const WaveWork& w, absl::Time deadline);
  absl::Status CompareSegmentChecksums(absl::Time deadline);
  // Allocates `bytes` from the copier and counts them as held
  // (RESOURCE_EXHAUSTED as Allocate); Release frees and uncounts them.
  absl::StatusOr<char*> Hold(int64_t bytes);
  void Release(char* p, int64_t bytes);
  absl::Status Convert(absl::Time deadline);
  absl::StatusOr<uint64_t> HashSegment(int32_t segment, const char* packed,
                                       bool packed_is_stream,
                                       std::vector<char>* scratch);

  const Plan* plan_ = nullptr;
  Side side_ = Side::kTrainer;
  int32_t rank_ = 0;
  int32_t global_rank_ = 0;
  std::vector<char*> buffers_;
  Transport* transport_ = nullptr;
  ExecutorOptions options_;
  std::unique_ptr<Copier> owned_copier_;
  Copier* copier_ = nullptr;
  int32_t num_lanes_ = 1;
  std::vector<WaveWork> work_;
  // Source: the rank's conversions and their scratch buffers, and the
  // memory those and the amax exchange take (Hold / Release).
  ConversionStage::Memory scratch_memory_;
  std::unique_ptr<ConversionStage> conversions_;
  std::vector<int64_t> staging_;
  std::vector<char*> staging_ptr_;
  // Bytes held from the copier now, and the most since Run began.
  int64_t held_bytes_ = 0;
  int64_t peak_held_bytes_ = 0;
  // Segment checksums: per message this rank takes part in, hashes of its segments.
  std::map<int32_t, std::vector<uint64_t>> hashes_;
};

}  // namespace refit

#endif  // REFIT_EXEC_EXECUTOR_H_
