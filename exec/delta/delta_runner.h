// DeltaRunner: a member's data plane for delta and verified rounds, one
// per member per plan, on host memory (Gloo, in-process) or on a GPU
// (NCCL): the steps are the same, the memory kind's DeltaWaveOps
// (wave_ops.h) does them, once per batch over all its messages. A batch is
// the plan waves of one lane that start in one window of
// BatchWindow's bytes of the lane (half a lane's room, see Staging), counted
// in the whole plan (Wave::plan_bytes, lane_offset), so a rank running its
// slice cuts the same batches as its peers; a wave reaching past its
// window's end is a batch of its own.
//
// Staging (delta_room.h): the plan's staging budget binds everything a
// delta round holds for its batches. Each lane has one lane room
// (DeltaLaneRoom: the per-lane share, half of it in a plan with relays),
// which its batches take in turn, each once the lane's previous batch is
// done with it (its transfers, copies and kernels): the batch's packed
// messages first, then its encoded (or, on an engine, received) payloads.
// Batches are cut so that no rank moves more than half a lane room in one
// (BatchWindow), or are one plan wave, whose bytes per rank the planner
// bounds. A sender keeps each receiver's encodings within the receiver's
// room (PairCodedCap): a message whose encoding would not fit travels
// dense; a receiver checks every header against that cap before it
// receives a byte. A relay keeps the encoded payloads it repeats in the
// rest of the budget (one ring, freed as their forwards complete); a
// payload that does not fit is forwarded dense. Lane rooms and the relay
// ring are taken from the copier when the runner is created and are all
// it holds within the budget (RunStats::peak_staging_bytes; a budget too
// small for one batch is refused at Create); the 32-byte message headers,
// one per message, come beside it (DeltaRoundStats). A trainer's committed
// round copies the current bytes of what it sent into its snapshot.
//
// Quantized engines (FP8, MXFP8, NVFP4: the plan's conversions): a trainer
// rank exchanges its cut tiles' amaxes (and NVFP4's global amaxes) with
// its peers once a round, before its first batch (a few floats a tile).
// Each batch then, on its lane right before its count, takes its messages
// that read quantized values one at a time, and each message's rows in
// steps (whole tiles of rows, with the exchanged scales:
// ConversionStage::Rows): a step's rows are quantized into the batch's
// quantizing area, past its packed messages in the lane room (where its
// encodings go once its count has read the packed bytes), and the parts
// of the message that read them are packed from there. The planner keeps
// part of every lane room free of a wave's bytes in a plan with
// conversions (plan/delta_lane.h: QuantizeRoom, at most 8 MiB; planner.h),
// and a step's area (its codes, scales and gathered source rows) takes at
// most that and what the batch's packed messages leave of the room (fewer
// tile rows a step, down to one), so the values live within the budget,
// and the first compare waits for the first batch's rows only; the engine
// receives the bytes a dense round sends. A rank whose batch's packed
// messages and one tile row's step do not fit its lane room is refused at
// Create, naming --staging_mib. The amax pass gathers the records it
// reads that do not lie dense (cut FP8 tiles, NVFP4 global amaxes) in
// bands of rows into the largest lane room, before the exchange; only a
// dim-0 row larger than the room, and the conversion steps' own small
// device scratch, come beside the budget (convert_workspace_bytes).
//
// A trainer rank keeps a snapshot: per message it sends, the bytes of the
// last committed version (GPU memory by default on a GPU member, pinned host
// memory as an option; `SnapshotBytes` says how many, the rank's share of
// the plan). Each round, per batch, it counts the changed words of every
// message against the snapshot in one pass, chooses per message what the
// codec (delta_codec.h) makes smallest (the changed words with their exact
// values or, past break-even, the dense bytes) and encodes them all. An
// engine rank whose mode (the round's announcement, delta_policy.h) is
// dense, and every message when the trainer has no snapshot of the
// announced base version, gets dense bytes, sent from where they lie.
// Finish(kCommitted) folds what was sent into the snapshot; kAborted
// drops it, so the snapshot only ever holds committed bytes.
//
// Receivers must post receives of exact sizes, and only the sender knows a
// delta's size after encoding it: an engine receives each batch in two
// exchanges on its lane, first the 32-byte DeltaHeaders of every message
// (one receive per peer), then the payloads, sized from the headers; the
// trainer posts both as one group (per peer its headers, then its
// payloads). A device member keeps batches in flight on every lane: the
// count of the next batch runs while this one is encoded and sent. An engine applies in place: a message that is one contiguous
// buffer range is applied where it lies (a dense one received there);
// otherwise the engine gathers its own current bytes of the message into
// staging (the reverse of unpack), applies the delta there and unpacks as a
// dense round does. Buffers are never moved or reallocated, so pointers
// and captured CUDA graphs stay valid. Every header and index is checked
// before a byte is written, so a malformed message changes nothing.
//
// Relays (plan.h: Message::relay): an engine rank forwards bytes it
// received in an earlier batch to another engine rank. A plan with relays
// runs every plan wave as its own batch, in the plan's order, so a
// forward comes after the batches that brought its bytes. A relay
// repeats the encoded payload it received (header and payload as they
// came, kept until forwarded) where its forward carries exactly the
// stream of one message it received (the same segments, boxes and
// records: identical regions) and the downstream rank's announced base
// equals its own; otherwise (a region cut differently: a sub-region of
// one received segment or a union of several, as between replicas of
// different engine layouts; a dense downstream; a dense arrival) it
// forwards the dense bytes of its own buffer after the apply of every
// batch that wrote into them, as a dense round's relay does. Its forwards
// are posted in the group of the batch's headers' receive. A forward
// whose segments no earlier batch of the relay brings whole is refused
// at Create. A trainer digests, beside its own messages, every relayed
// copy of its bytes, traced back hop by hop region by region
// (plan/relay_roots.h: RelayArrivals) to the part of its message's
// stream it sent first (its plan slice carries the relays of its bytes:
// plan/relay_roots.h).
//
// Verified rounds (RoundStart::digest): the trainer digests all its current
// bytes of every message at their engine places (a GPU member in the same
// read as its count), the engine digests what its buffers hold at every
// place the plan writes, each batch once applied (a GPU member beside the
// later batches' transfers); both are in RunStats::digests per (engine rank, tensor) for the control plane to
// compare (round_digest.h: CompareDigests).
#ifndef REFIT_EXEC_DELTA_DELTA_RUNNER_H_
#define REFIT_EXEC_DELTA_DELTA_RUNNER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "exec/convert/conversion_stage.h"
#include "exec/convert/copier.h"
#include "exec/program/copy_program.h"
#include "exec/delta/delta_policy.h"
#include "exec/delta/round_digest.h"
#include "exec/delta/wave_ops.h"
#include "exec/round_runner.h"
#include "exec/transport/transport.h"
#include "layout/side.h"
#include "plan/plan.h"

namespace refit {

// A trainer rank's snapshot: the bytes of the last committed version of
// what it sends, one copy per source region (SourceKey): the messages of
// one region to several engine replicas carry the same bytes, so they
// share it. The member owns it, so it outlives a runner rebuilt after an
// aborted round (a broken transport); a runner for another plan (other
// fingerprint) empties it. Regions free themselves (host or GPU memory).
struct DeltaSnapshot {
  struct Region {
    std::shared_ptr<char> data;
    int64_t bytes = 0;
  };
  std::string plan_fingerprint;
  int64_t version = -1;  // -1: none
  std::map<std::string, Region> messages;  // by SourceKey
  int64_t bytes() const {
    int64_t n = 0;
    for (const auto& [m, r] : messages) n += r.bytes;
    return n;
  }
};

struct DeltaRunnerOptions {
  // Trainer: the member's snapshot (nullptr: the runner keeps its own).
  DeltaSnapshot* snapshot = nullptr;
  // Send deltas where the announcement allows (false: every round dense).
  bool delta = true;
  // Digest both sides of every round until a Begin says otherwise
  // (RunStats::digests).
  bool digest = true;
  // A trainer rank's snapshot may hold at most this many bytes (0: no
  // bound); Create fails with RESOURCE_EXHAUSTED naming the rank above it.
  int64_t max_snapshot_bytes = 0;
  // The transport's memory kind: staging, pack/unpack and conversions
  // (null: the host copier) and the codec's steps (null: MakeHostWaveOps).
  // Both must outlive the runner unless given to Adopt.
  Copier* copier = nullptr;
  DeltaWaveOps* ops = nullptr;
};

// One batch's steps on a member's thread, in seconds since the round
// began. Trainer: its count enqueued, awaited, its group posted. Engine:
// its headers' receive posted, its headers on the host, its payloads'
// receive posted, its apply enqueued.
struct DeltaBatchTimes {
  int32_t lane = 0;
  double start = 0, ready = 0, posted = 0, applied = 0;
};

// What one round moved in delta form, beside RunStats.
struct DeltaRoundStats {
  int64_t messages = 0;
  int64_t dense_messages = 0;   // sent or received dense
  int64_t dense_bytes = 0;      // the messages' dense size
  int64_t wire_bytes = 0;       // headers + payloads
  int64_t changed_words = 0;   // trainer: counted; engine: sent
  int64_t words = 0;           // of the messages (their codec words)
  // Within the plan's staging budget (delta_runner.h: Staging): the most
  // packed bytes one batch staged, the most encoded bytes one batch held
  // in its lane room, the most payloads a relay held for its forwards at
  // once, and the most of the budget in use at once (lane rooms' batches
  // and held payloads together), each as the batches took their rooms.
  int64_t staging_bytes = 0;
  int64_t encoding_bytes = 0;
  int64_t held_bytes = 0;
  int64_t peak_used_bytes = 0;
  // Messages sent (forwarded) dense because their encoding did not fit the
  // receiver's room in the budget.
  int64_t dense_for_room = 0;
  // Beside the budget: the message headers (32 bytes each), and a trainer's
  // conversion steps' own working memory (their device scratch, and the
  // amax pass's gather of a dim-0 row larger than the largest lane room).
  int64_t header_bytes = 0;
  int64_t convert_workspace_bytes = 0;
  double digest_seconds = 0;    // time spent digesting
  int64_t batches = 0;          // batches of waves run (delta_runner.h)
  int64_t groups = 0;           // groups of sends and receives posted
  // Payload transfers posted (sends or receives): a batch's encoded
  // payloads to (from) one peer travel as one; dense ones each apart.
  int64_t transfers = 0;
  // A relay (engine): the bytes it forwarded (headers + payloads), and of
  // them the dense payloads (not a repeated encoded one).
  int64_t forwarded_bytes = 0;
  int64_t forwarded_dense_bytes = 0;
  // Where the member's thread spent the round (host time): trainer: the
  // counts awaited, encodes enqueued; both: waiting on the transport
  // (an engine: for headers and, on the host, payloads), the applies
  // enqueued (engine), the end of the round (every lane drained, the
  // applies' checks read).
  // Trainer with quantized engines: the amax exchange before the first
  // batch, and enqueueing the batches' quantization.
  double amax_seconds = 0;
  double convert_seconds = 0;
  double count_wait_seconds = 0;
  double encode_seconds = 0;
  double transport_wait_seconds = 0;
  double apply_seconds = 0;
  double drain_seconds = 0;
  // Trainer on a GPU (wave_ops.h): its encodes' kernel time.
  double encode_gpu_seconds = 0;
  // Per batch, in the order run; the trainer's counts' kernels (start,
  // end) in seconds since the round began, in the same order.
  std::vector<DeltaBatchTimes> batch_times;
  std::vector<std::pair<double, double>> count_windows;
  // From count_windows: the counts, their kernels' time summed, and from
  // the first one's start to the last one's end (the difference: the
  // counts' stream waiting).
  int64_t counts() const { return static_cast<int64_t>(count_windows.size()); }
  double count_gpu_seconds() const;
  double count_span_gpu_seconds() const;
};

class DeltaRunner : public RoundRunner {
 public:
  // As Executor::Create: INVALID_ARGUMENT for a missing buffer or a bad
  // plan naming the tensor (or the wave, when the plan lacks the whole
  // plan's wave bytes: plan/wave_bytes.h), or when the rank relays bytes
  // no earlier batch of its brings (naming the ranks, the tensor and the
  // wave; see Relays above), FAILED_PRECONDITION when the transport's
  // rank or memory kind does not match the copier's and ops',
  // RESOURCE_EXHAUSTED
  // naming the trainer rank when its snapshot would pass
  // options.max_snapshot_bytes, INVALID_ARGUMENT naming
  // staging_budget_bytes (--staging_mib), the budget and the batch when
  // the plan's staging budget holds less than one of the rank's batches
  // (see Staging above; on a trainer with conversions, its packed
  // messages and a quantizing step of one tile row). A trainer rank
  // with conversions (FP8, MXFP8, NVFP4 engines) quantizes each batch's
  // rows in its lane room (see Quantized engines above), and compares the
  // engine-format bytes (codes and scales); FAILED_PRECONDITION when its
  // copier cannot convert on every lane.
  static absl::StatusOr<std::unique_ptr<DeltaRunner>> Create(
      const Plan& plan, Side side, int32_t rank, std::vector<char*> buffers,
      Transport* transport, DeltaRunnerOptions options = {});

  // The next round's announcement (round_runner.h): per engine rank dense
  // or delta against round.delta_base (before the first Begin: every rank
  // dense), and whether it digests (before the first Begin:
  // options.digest).
  void Begin(const RoundStart& round) override;
  // The runner owns its transport, copier and ops from now on (any may be
  // null); they are destroyed after the runner's buffers, ops first.
  void Adopt(std::unique_ptr<Transport> t, std::unique_ptr<Copier> copier = nullptr,
             std::unique_ptr<DeltaWaveOps> ops = nullptr) {
    owned_transport_ = std::move(t);
    owned_copier_ = std::move(copier);
    owned_ops_ = std::move(ops);
  }
  void AdoptTransport(std::unique_ptr<Transport> t) { owned_transport_ = std::move(t); }
  ~DeltaRunner() override;

  // Runs this member's part of the round begun last. Fails with the
  // transport's error, DATA_LOSS naming the tensor and peer for a malformed
  // message, or the reason given to Cancel. A failed round leaves the
  // trainer's snapshot as it was (Finish it as aborted) and takes the
  // transport down: build a new runner (the member's snapshot carries
  // over) for the next round. RunStats carries the digest parts (a round
  // begun with digest) and the counts of delta and dense messages;
  // delta_stats() the rest.
  absl::StatusOr<RunStats> Run(absl::Time deadline) override;
  void Cancel(const absl::Status& reason) override;

  // kCommitted (trainer): the round begun last committed everywhere: the
  // snapshot now holds what it sent, of that round's version, copied from
  // the trainer's bytes (which must not have changed since Run: a member
  // returns only after the outcome). kAborted: the snapshot keeps the
  // previous version. Should updating the snapshot fail (a device error),
  // the snapshot is emptied and the next round goes dense.
  void Finish(RoundOutcome outcome) override;

  // The version the snapshot holds (-1: none yet).
  int64_t snapshot_version() const { return snapshot_->version; }
  // The bytes a trainer rank's snapshot holds when complete (one copy per
  // source region).
  static int64_t SnapshotBytes(const Plan& plan, int32_t trainer_rank);
  // The window batches are cut by: half the lane room (delta_room.h:
  // DeltaLaneRoom), so that a batch's packed messages and their encodings
  // fit the room together; 0 (every plan wave its own batch) for a plan
  // with relays.
  static int64_t BatchWindow(const Plan& plan);
  // What message `m` sends, as a key: its segments' trainer records and
  // boxes, in order. Messages with equal keys carry equal bytes.
  static std::string SourceKey(const Plan& plan, const Message& m);

  // The last round's figures in delta form.
  const DeltaRoundStats& delta_stats() const { return delta_stats_; }

 private:
  struct MsgWork {
    int32_t message = 0;
    int32_t peer = 0;  // global rank
    int32_t engine_rank = 0;
    int64_t bytes = 0;
    int word_bytes = 1;
    std::string source_key;  // trainer: SourceKey
    char* direct = nullptr;       // the buffer range when contiguous
    std::vector<CopyTask> tasks;  // pack (trainer) or unpack (engine)
    // Trainer: reads quantized values (a scratch buffer of the plan): the
    // rows of the conversions it reads, quantized into its batch's
    // quantizing area right before they are packed (Slice: per scratch
    // buffer, the bytes [lo, hi) a step writes, at `at` in the area).
    struct Slice {
      int32_t buffer = 0;
      int64_t lo = 0, hi = 0, at = 0;
    };
    bool converted = false;
    std::vector<ConversionStage::Rows> convs;
    // convs in steps fitting QuantizeRoom and the room the batch leaves
    // (StepConversions), quantized and packed one at a time; the quantizing area the largest takes (LayOutStep's
    // slices, then its source rows gathered where strided).
    std::vector<ConversionStage::Rows> steps;
    int64_t convert_bytes = 0;
    int64_t stage_offset = -1;    // in the batch's staging when packed
    std::vector<StreamDigestRun> runs;  // verify: its stream's digest runs
    std::vector<int32_t> run_slots;     // their slots in digest_keys_
    std::vector<DigestItem> digest;     // this round's runs (trainer: counted with it)
    // This round: the header sent or received and where its payload lies.
    DeltaHeader header;
    char* payload = nullptr;
    // Relays (engine): a forward's source, the message received whose
    // stream it repeats (-1: none, always dense); for a received message,
    // how many later forwards repeat it (its encoded payload is kept:
    // held_).
    int32_t source = -1;
    int32_t repeats = 0;
  };
  // A received encoded payload kept, in the relay ring, for the forwards
  // that repeat it; its ring space is free once the last of them is sent
  // (the group that sent it, `ticket` on `lane`, complete).
  struct Held {
    char* data = nullptr;
    int64_t offset = 0, bytes = 0;  // in the ring
    bool valid = false;             // kept this round
    int32_t remaining = 0;          // forwards not yet posted
    int32_t lane = 0;
    int64_t ticket = 0;
    DeltaHeader header;
  };
  struct BatchWork {
    int32_t lane = 0;
    std::vector<MsgWork> msgs;  // by peer, then message
    std::vector<std::pair<int32_t, int32_t>> peers;  // (peer, messages) in order
    char* headers = nullptr;  // memory of the transport's kind
    // Packed messages: the lane room (delta_runner.h: Staging), from
    // stage_offset on; encodings from coded_offset on.
    char* staging = nullptr;
    int64_t staging_bytes = 0;
    int64_t coded_offset = 0;
    // Trainer with quantized engines: the quantizing area, where each
    // converted message's rows are quantized in turn before it is packed:
    // convert_bytes (its largest step's) at convert_offset of the lane
    // room, past the packed messages, where the batch's encodings later go.
    int64_t convert_offset = 0, convert_bytes = 0;
    // What bounds the bytes a rank moves in the batch (delta_room.h:
    // PairBound): the window it was cut by (0: one plan wave alone), the
    // wave's whole-plan bytes; per peer (peers' order; forwards:
    // forward_peers' order) the encoded bytes the pair may carry
    // (PairCodedCap); the most this rank's encodings may take in it.
    int64_t window = 0, wave_bytes = 0;
    std::vector<int64_t> peer_caps, forward_caps;
    int64_t coded_room = 0;
    int64_t dense_bytes = 0;  // of its messages
    int64_t plan_waves = 0;   // the plan waves with messages of this rank in it
    std::vector<EncodeItem> items;  // trainer: this round's, counting
    // Engine: the relay messages it sends in the batch, by peer, then
    // message, their peers and headers (memory of the transport's kind,
    // written from forward_host each round).
    std::vector<MsgWork> forwards;
    std::vector<std::pair<int32_t, int32_t>> forward_peers;
    char* forward_headers = nullptr;
    std::vector<DeltaHeader> forward_host;
    int32_t next_on_lane = -1;  // the next batch on this lane (work_ index), -1: none
    bool headers_posted = false;  // engine: this round's headers' receive posted
    bool claimed = false;  // this round: holds its lane's staging (ClaimFor)
  };
  DeltaRunner() = default;
  absl::Status Prepare(const Plan& plan, bool src);
  absl::StatusOr<RunStats> RunBatches(absl::Time deadline);
  // Quantized engines (delta_convert.cc). PrepareConversions: a trainer
  // rank's conversions (none: conversions_ null) and their steps per lane.
  // ExchangeAmaxes: the round's amax exchange, before any batch.
  // NoteConversions: whether m reads quantized values; if so, the rows it
  // reads and its pack program (a converted message is always packed).
  // StepConversions: m's rows in steps whose quantizing area (LayOutStep's
  // slices and the step's gather) fits `room` where one tile row's does;
  // returns the largest step's area (m.convert_bytes). StageConverted:
  // enqueues on w's
  // lane, message by message, the quantization of its rows into w's
  // quantizing area and its packing from there.
  absl::Status PrepareConversions(const Plan& plan);
  absl::Status ExchangeAmaxes(absl::Time deadline);
  absl::Status NoteConversions(const Plan& plan, const Message& m, MsgWork& mw);
  int64_t StepConversions(MsgWork& m, int64_t room) const;
  // Where step r's rows lie in a quantizing area: per scratch buffer they
  // write, its bytes [lo, hi) at `at`; returns where its gather goes.
  int64_t LayOutStep(const ConversionStage::Rows& r, std::vector<MsgWork::Slice>* slices) const;
  absl::Status StageConverted(BatchWork& w);
  // Waits for the conversions enqueued on `lane` (all lanes: -1); their
  // error (a non-finite value). ConversionWorkspace: the conversion
  // steps' own working memory now.
  absl::Status SyncConversions(int32_t lane);
  int64_t ConversionWorkspace() const;
  // A trainer's batch in two steps: BeginSend packs and starts the count,
  // EndSend waits for it, encodes and posts; the next batch's BeginSend
  // runs before this one's EndSend when its lane differs.
  absl::Status BeginSend(BatchWork& w, absl::Time deadline);
  absl::Status EndSend(BatchWork& w, absl::Time deadline, RunStats* stats);
  // An engine's batch in two steps: BeginReceive posts the headers'
  // receive, EndReceive waits for it, posts the payloads' and applies; the
  // next batch's headers are posted before this one's are awaited when its
  // lane differs, and the next batch of the same lane has its headers'
  // receive posted in the group of this one's payloads (one group a batch).
  absl::Status BeginReceive(BatchWork& w, absl::Time deadline);
  // Relays (delta_relay.cc). PrepareRelays links each forward to its
  // source and marks what is kept (engine), or adds the digest runs of
  // the relayed copies of a trainer's segments to its messages.
  // ForwardSends stages w's forwards (dense ones packed from the buffers)
  // and returns their sends; KeepPayloads keeps w's received payloads that
  // later forwards repeat, in the ring while it has room.
  absl::Status PrepareRelays(const Plan& plan, bool src,
                             std::map<std::pair<int32_t, int32_t>, int32_t>* slots);
  absl::StatusOr<std::vector<SendOp>> ForwardSends(BatchWork& w, absl::Time deadline);
  absl::Status KeepPayloads(BatchWork& w);
  // After w's forwards were posted: the kept payloads whose last forward
  // they were are free once that group completes (RingReclaim).
  void ForwardsPosted(const BatchWork& w);
  // DATA_LOSS naming the message and its sender when the encodings w's
  // headers announce (at: where each lies, -1 dense; coded: their bytes)
  // pass a peer's cap or the batch's room.
  absl::Status CheckRoom(const BatchWork& w, const std::vector<int64_t>& at,
                         int64_t coded) const;
  // The receives of w's headers (one per peer).
  std::vector<RecvOp> HeaderReceives(const BatchWork& w) const;
  absl::Status EndReceive(BatchWork& w, absl::Time deadline, RunStats* stats);
  absl::Status Post(int32_t lane, std::vector<SendOp> sends, std::vector<RecvOp> recvs,
                    absl::Time deadline);
  absl::Status Drain(absl::Time deadline);
  // Before its first round's first transfer, a runner exchanges one byte
  // with each of its peers on every lane, one lane at a time, each awaited:
  // NCCL connects a communicator to a peer at its first operation, and a
  // lane connecting while another lane's receive kernel spins (waiting on
  // a sender that is itself connecting) stalls until the deadline.
  absl::Status ConnectLanes(absl::Time deadline);
  // Verified rounds: the digest items of m's stream at `stream`; an
  // engine's digest of batch w once applied (enqueued behind it); the
  // round's sums.
  void DigestItems(MsgWork& m, const char* stream) const;
  absl::Status DigestBatch(BatchWork& w, absl::Time deadline);
  // Adds the round's digest sums (the ops' slots) to *sums.
  absl::Status DigestRound(absl::Time deadline, DigestSums* sums);
  // Finish(kCommitted): the snapshot takes what the round sent, of `version`.
  void Commit(int64_t version);
  // The round's kernel times (the ops' TakeTimes) into delta_stats_, its
  // counts' windows from the round's start.
  void NoteTimes(const WaveOpsTimes& times);
  // Staging (delta_staging.cc). The lane's batches take its lane room in
  // turn. PlanRooms sets every batch's bound, caps and layout (LayOutStaging:
  // its packed messages where alignment allows within `limit`: the room
  // left beside its encodings, and on a trainer with converted messages
  // beside QuantizeRoom; its quantizing steps: StepConversions) and
  // refuses a budget too small for one;
  // AllocateRooms takes every lane's room and a relay's ring from the
  // copier. ClaimLane waits until the lane's earlier batch of this round no
  // longer reads or writes its room (its transfers, copies and kernels).
  // CodedFor returns where w's `bytes` of encodings go in its lane room.
  absl::Status PlanRooms(const Plan& plan);
  static void LayOutStaging(BatchWork& w, int64_t limit);
  absl::Status AllocateRooms();
  absl::StatusOr<char*> Hold(int64_t bytes);
  absl::Status ClaimLane(int32_t lane, absl::Time deadline);
  // ClaimLane for batch w, once a round.
  absl::Status ClaimFor(BatchWork& w, absl::Time deadline);
  // Waits for every group posted on `lane`.
  absl::Status DrainLane(int32_t lane, absl::Time deadline);
  absl::StatusOr<char*> CodedFor(BatchWork& w, int64_t bytes);
  // The bytes of the lane room w's batch uses now (staging and encodings),
  // and the relay ring's: noted for DeltaRoundStats.
  void NoteLaneUse(const BatchWork& w, int64_t coded);
  void NoteUse();
  // The relay ring: keeps `bytes` of message `message`'s payload for
  // `repeats` forwards (null: no room left, after RingReclaim frees what
  // the completed forwards no longer need).
  Held* RingTake(int32_t message, int64_t bytes, int32_t repeats);
  void RingReclaim();
  // The copies that put the member's own current bytes of packed message
  // m at its place in w's staging (a trainer packs, an engine gathers);
  // StageCurrent enqueues them for every packed message of w on its lane,
  // after w's conversions on a trainer (on the host: done on return).
  absl::StatusOr<std::vector<ResolvedCopy>> CurrentCopies(const BatchWork& w,
                                                          const MsgWork& m) const;
  absl::Status StageCurrent(BatchWork& w, absl::Time deadline);
  std::string Context(const MsgWork& m) const;

  const Plan* plan_ = nullptr;
  Side side_ = Side::kTrainer;
  int32_t rank_ = 0;
  std::vector<char*> buffers_;
  // Destroyed last, in this order reversed: ops, copier, transport.
  std::unique_ptr<Transport> owned_transport_;
  std::unique_ptr<Copier> owned_copier_;
  std::unique_ptr<DeltaWaveOps> owned_ops_;
  std::unique_ptr<Copier> host_copier_;
  std::unique_ptr<DeltaWaveOps> host_ops_;
  Transport* transport_ = nullptr;
  Copier* copier_ = nullptr;
  DeltaWaveOps* ops_ = nullptr;
  DeltaRunnerOptions options_;
  std::vector<BatchWork> work_;
  std::vector<int32_t> in_flight_;  // groups posted per lane, not yet waited
  std::vector<int64_t> posted_, done_;  // groups posted and waited per lane
  // Per lane: its room (bytes), what its batch uses of it now, whether a
  // batch of the lane ran this round. room_: DeltaLaneRoom.
  std::vector<char*> lane_room_;
  std::vector<int64_t> lane_room_bytes_, lane_use_;
  std::vector<bool> lane_used_;
  int64_t room_ = 0;
  // Taken from the copier within the budget (lane rooms, ring).
  int64_t budget_held_ = 0;
  int64_t header_bytes_ = 0;        // every batch's headers
  // The relay ring: kept payloads in the order kept (held_ by the plan
  // message received; ring_ their messages, oldest first).
  char* ring_ = nullptr;
  int64_t ring_bytes_ = 0, ring_used_ = 0;
  std::map<int32_t, Held> held_;
  std::vector<int32_t> ring_order_;
  // Trainer with quantized engines: its conversions (no scratch of their
  // own), the memory the amax exchange takes, per lane the conversion
  // steps on that lane, and per scratch buffer the conversions writing it.
  ConversionStage::Memory exchange_memory_;
  std::unique_ptr<ConversionStage> conversions_;
  std::vector<std::unique_ptr<ConvertOps>> lane_convert_;
  std::map<int32_t, std::vector<int32_t>> writers_;
  // buffers_ with one converted message's slices at their places in its
  // batch's quantizing area while it is staged (StageConverted).
  std::vector<char*> convert_buffers_;
  // The exchange's bytes taken in a lane room this round, and those it
  // took from the copier (the lane room had no space).
  int64_t exchange_used_ = 0, exchange_beside_ = 0;
  std::vector<EngineDeltaMode> modes_;
  int64_t version_ = 0;  // of the round begun last
  std::vector<std::pair<int32_t, int32_t>> digest_keys_;  // slot -> (engine rank, tensor)
  DeltaSnapshot own_snapshot_;
  DeltaSnapshot* snapshot_ = &own_snapshot_;
  bool sent_ = false;  // trainer: a round ran since the last Finish
  char* connect_bytes_ = nullptr;  // ConnectLanes' bytes, one per peer (null: not yet)
  DeltaRoundStats delta_stats_;
  absl::Time round_start_;
  // Notes a step of work_[w] (delta_stats_.batch_times): the seconds since
  // the round began.
  double Since() const { return absl::ToDoubleSeconds(absl::Now() - round_start_); }
  DeltaBatchTimes& TimesOf(const BatchWork& w) {
    return delta_stats_.batch_times[static_cast<size_t>(&w - work_.data())];
  }
  absl::Mutex mu_;
  absl::Status cancelled_ ABSL_GUARDED_BY(mu_);
};

}  // namespace refit

#endif  // REFIT_EXEC_DELTA_DELTA_RUNNER_H_
