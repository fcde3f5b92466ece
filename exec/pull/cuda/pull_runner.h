// PullRunner: the colocated data plane of one member. Members on one host
// (trainer and engine sharing GPUs, or GPUs of one host) move weights with
// one copy: every receiver reads straight from its senders' buffers.
//
// Prepare (Create), once per plan:
//   - each sender describes its buffers for every receiver it feeds
//     (pull_memory.h: CUDA IPC handles for cudaMalloc memory, cuMem file
//     descriptors for expandable segments / VMM allocators), in the order
//     of PairSourceBuffers (pull_program.h), over a small Gloo (TCP)
//     control channel on 127.0.0.1;
//   - each receiver maps them once and compiles its pull program into
//     device work items (pull_kernels.h): source address in the mapped
//     sender buffer -> destination address in its own buffer. No staging,
//     no pack, no unpack.
// A round (Run):
//   - a sender records an event on the stream its weights are written on
//     (options.ready_stream, the legacy default stream by default: where
//     PyTorch's default stream writes), waits for it — its own queued
//     writes — and publishes "version N in place" on its round signal
//     (exec/transport/peer_signal.h: a word in shared memory and a futex wake);
//   - a receiver, once every sender's signal says N, launches one
//     gather-scatter kernel for all of its copies (those from a sender on
//     another GPU on the GPU's copy engines alongside, spread over
//     kPeerCopyStreams streams), waits for them, and
//     publishes "done with N"; a sender returns once every receiver's
//     signal says so, so the trainer may change its weights afterwards.
// One signal per member per round, microseconds each; no socket round
// trip and no host round trip per tensor or per message. A member whose
// round fails publishes "failed N", so its peers fail at once naming it;
// a peer process that exits is noticed within a millisecond. No stream of
// either side ever waits on an event of the other process, so a peer that
// dies leaves nothing queued on this GPU that could wait forever. The
// mappings of a dead sender's memory stay valid until the engine is
// destroyed. The Gloo control channel carries only prepare and the amax
// exchanges (FP8 / MXFP8 tiles cut between trainers, NVFP4 global amaxes).
//
// FP8, MXFP8 and NVFP4 conversions (plan/conversion.h) run in one pass
// where the plan says so (Conversion::one_pass, plan/one_pass.h;
// exec/pull/fused_pull.h): the sender exports the BF16 weight in
// place of its scratch buffers and describes it, and the receiver's round
// runs kernels after the copies that read it and write codes and scales
// (NVFP4's with the global amaxes the senders computed and exchanged
// before "in place"); the rest (tiles cut between trainers, DeepGEMM
// requantization) the sender converts into scratch before "in place", as
// before.
//
// Members for which options.pull_peer is false (another host) are left
// out: the caller moves their bytes another way (NCCL).
#ifndef REFIT_EXEC_PULL_CUDA_PULL_RUNNER_H_
#define REFIT_EXEC_PULL_CUDA_PULL_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cancellation.h"
#include "exec/pull/cuda/fused_pull_device.h"
#include "exec/pull/cuda/pull_memory.h"
#include "exec/run_stats.h"
#include "exec/transport/gloo_transport.h"
#include "exec/convert/conversion_stage.h"
#include "exec/pull/fused_pull.h"
#include "exec/transport/kv_store.h"
#include "exec/transport/peer_signal.h"
#include "exec/program/plan_side.h"
#include "exec/program/resolved_copy.h"
#include "exec/round_runner.h"
#include "plan/plan.h"

namespace refit {

struct PullRunnerOptions {
  int32_t device = 0;  // CUDA device of this member's buffers
  std::string key_prefix = "pull";
  absl::Duration connect_timeout = absl::Seconds(60);
  // Sender: the cudaStream_t its weights are written on; null = the legacy
  // default stream (PyTorch's default stream).
  void* ready_stream = nullptr;
  // Whether the member of global rank g (trainers first, then engines)
  // takes part: the members of this host. Empty = every member.
  std::function<bool(int32_t)> pull_peer;
  // Receiver: thread blocks its copy kernel runs on at most (each then
  // copies every receive_blocks-th work item); 0: one per work item, every
  // SM. A staged engine member (client/data_plane.h),
  // which keeps serving while its round arrives, sets kStagedReceiveBlocks
  // so that the engine's kernels keep most SMs.
  int32_t receive_blocks = 0;
};

// Largest piece of work of one thread block of the receiver's copy kernel
// (pull_kernels.h; docs/benchmarks.md, "A/B decisions").
inline constexpr int64_t kPullItemBytes = 64 << 10;

// Copies a receiver reads from a sender on another GPU go to the GPU's
// copy engines (copy_engine.h), spread over this many streams next to the
// kernel's, which keeps the copies from its own GPU (docs/benchmarks.md,
// "A/B decisions"). Copies between members on one GPU run in the kernel.
inline constexpr int32_t kPeerCopyStreams = 4;

// PullRunnerOptions::receive_blocks of a staged engine member
// (bench/staged_bench.cc measures the engine's slowdown and the receive
// time for several; docs/benchmarks.md, 2026-12-06, has the figures that
// chose it, the copy engines without a kernel among them).
inline constexpr int32_t kStagedReceiveBlocks = 32;

class PullRunner : public RoundRunner {
 public:
  // Prepares `rank` of `side` of `slice` (its ExtractSlice) over its own
  // `buffers` (indexed like the slice's side's buffers; device memory of
  // options.device), bootstrapping the control channel through `store`.
  // Fails with FAILED_PRECONDITION naming the address of memory that cannot
  // be shared, INVALID_ARGUMENT for a missing buffer or a malformed plan,
  // UNAVAILABLE / DEADLINE_EXCEEDED naming the peer when a peer does not
  // connect, cannot be mapped, or dies; by `deadline` at the latest.
  static absl::StatusOr<std::unique_ptr<PullRunner>> Create(
      const Plan& slice, Side side, int32_t rank, std::vector<char*> buffers,
      KvStore* store, PullRunnerOptions options, absl::Time deadline);
  ~PullRunner() override;

  // Pull rounds move dense bytes (one device copy per piece is cheaper than
  // reading two versions): every round runs dense, with no digests, and
  // its outcome changes nothing.
  void Begin(const RoundStart& round) override {}
  void Finish(RoundOutcome outcome) override {}

  // Runs one round (see above); its peak_staging_bytes is a converting
  // sender's scratch and conversion workspace (0 otherwise). Fails with DEADLINE_EXCEEDED naming the
  // peers still waited for, UNAVAILABLE naming a peer that died, the
  // cancel reason after Cancel, or UNAVAILABLE with the CUDA error. The
  // runner must not be run again after a failure.
  absl::StatusOr<RunStats> Run(absl::Time deadline) override;

  // Makes the wait in progress and every later Run fail promptly with
  // `reason`. Thread-safe.
  void Cancel(const absl::Status& reason) override;

  // Bytes this member sends (sender) or receives (receiver) per round.
  int64_t bytes() const { return bytes_; }
  // Work items of the receiver's kernel (0 on a sender).
  int64_t num_items() const { return num_items_; }
  // The receiver's copies on the copy engines per round, and their bytes.
  int64_t num_copy_engine_copies() const { return num_copy_engine_copies_; }
  int64_t copy_engine_bytes() const { return copy_engine_bytes_; }
  // Quantize-on-pull items of the receiver (0 on a sender); the
  // conversions a sender leaves to its receivers.
  int64_t num_quantize_items() const { return quant_ != nullptr ? quant_->num_items() : 0; }
  int64_t num_fused_conversions() const { return static_cast<int64_t>(fused_.size()); }
  // Global ranks this member exchanges with.
  const std::vector<int32_t>& peers() const { return peers_; }

 private:
  PullRunner() = default;
  absl::Status Prepare(const Plan& slice, std::vector<char*> buffers,
                       KvStore* store, absl::Time deadline);
  absl::Status ExportTo(const Plan& slice, const std::vector<char*>& buffers,
                        absl::Time deadline);
  absl::Status ImportFrom(const Plan& slice, std::vector<char*> buffers,
                          absl::Time deadline);
  // One control exchange: sends `out[i]` to send_to[i], receives into
  // in[i] from recv_from[i] (sizes fixed by the vectors).
  absl::Status Exchange(const std::vector<int32_t>& send_to,
                        const std::vector<std::string>& out,
                        const std::vector<int32_t>& recv_from,
                        std::vector<std::string>* in, absl::Time deadline);
  // A round's halves (Run publishes a failure of either).
  absl::Status RunSender(absl::Time deadline);
  absl::Status RunReceiver(absl::Time deadline, RunStats* stats);
  // Waits until every peer's signal says this round is done (receivers)
  // or in place (senders); UNAVAILABLE naming a peer that failed it or
  // exited, DEADLINE_EXCEEDED, or the cancel reason.
  absl::Status WaitPeers(absl::Time deadline);
  // Polls the event until complete, `deadline` or Cancel.
  absl::Status WaitEvent(void* event, absl::Time deadline, const char* what);
  absl::Status CheckCancelled();
  int32_t Local(int32_t global) const;  // control-channel rank of a member

  Side side_ = Side::kTrainer;
  int32_t rank_ = 0;
  int32_t global_rank_ = 0;
  int32_t src_world_ = 0;  // trainers: global ranks below it
  char device_uuid_[16] = {};  // options.device's physical identity
  PullRunnerOptions options_;
  std::vector<int32_t> members_;  // global ranks on the control channel
  std::vector<int32_t> peers_;    // global ranks this member exchanges with
  std::unique_ptr<GlooTransport> control_;  // prepare and amax exchanges
  std::unique_ptr<PeerSignal> signal_;       // this member's round signal
  std::vector<std::unique_ptr<PeerSignal>> peer_signals_;  // like peers_
  std::unique_ptr<MemoryExporter> exporter_;
  std::unique_ptr<MemoryImporter> importer_;
  void* stream_ = nullptr;  // cudaStream_t
  void* event_ = nullptr;   // cudaEvent_t
  void* start_event_ = nullptr;  // cudaEvent_t before the pull kernel (its GPU time)
  // cudaEvent_t after the quantizing items, which the copy engines' streams
  // wait for when the items write NVFP4 global scales (null otherwise).
  void* quant_event_ = nullptr;
  void* items_ = nullptr;   // device PullItem array
  int64_t num_items_ = 0;
  // Copies from senders on other GPUs for the copy engines: list i on
  // copy_engine_streams_[i], copy_engine_events_[i] recorded after it.
  std::vector<std::vector<ResolvedCopy>> copy_engine_copies_;
  int64_t num_copy_engine_copies_ = 0;
  int64_t copy_engine_bytes_ = 0;
  std::vector<void*> copy_engine_streams_;  // cudaStream_t
  std::vector<void*> copy_engine_events_;   // cudaEvent_t

  int64_t bytes_ = 0;
  // Sender with conversions (plan/conversion.h): its scratch buffers,
  // filled before each round's "weights in place".
  absl::Status PrepareConversions(const Plan& slice, std::vector<char*>* buffers);
  absl::Status Convert(absl::Time deadline);
  std::unique_ptr<ConversionStage> conversions_;
  // Quantize-on-pull: the sender's fused conversions (slice indices) and
  // the slice it converts the rest of; the receiver's device items.
  std::set<int32_t> fused_;
  std::unique_ptr<Plan> kept_slice_;
  std::unique_ptr<FusedPullDevice> quant_;  // receiver: its items, if any
  std::vector<char*> own_buffers_;
  uint64_t round_ = 0;
  Cancellation cancel_;  // set by Cancel; polled by the waits
};

}  // namespace refit

#endif  // REFIT_EXEC_PULL_CUDA_PULL_RUNNER_H_
