// Plan: the static, validated transfer plan between two SideLayouts.
//
// Built once per membership by BuildPlan (planner.h), a pure function. It
// lists every copy (Segment: a box of a tensor from one source record to one
// destination record), groups the segments between one (source rank,
// destination rank) pair into Messages, and orders Messages into Waves.
//
// Executing a wave on a rank means: pack each outgoing message's segments
// (in order, each box in row-major order) into staging unless the message
// is src_contiguous (then send straight from the buffer), post every send
// and receive of the wave in one group, and unpack each incoming message
// (unless dst_contiguous: then it was received in place).
//
// Deadlock freedom: every rank executes the waves it takes part in, in the
// global wave order, each wave as one group of sends and receives, on the
// wave's lane (one communicator + stream per lane). Since all ranks see
// the same order per lane, every group's peers post matching groups.
//
// Ranks are side-local in the plan: trainer rank t and engine rank e. A
// transport joining both sides numbers them t and src_world + e.
//
// Relays (PlannerOptions::relay): a relay message is sent by an engine rank
// from its own buffers: its src_rank is an engine rank, and its segments'
// src_record index Plan::dst.records (records on that engine rank holding
// the segment's box of the same tensor, hence the same bytes; the engine
// ranks may be of replicas of different layouts). Its wave comes strictly after every wave that delivered those
// bytes to the relaying rank, so the global wave order keeps deadlock
// freedom and the bytes are in place before they are forwarded.
#ifndef REFIT_PLAN_PLAN_H_
#define REFIT_PLAN_PLAN_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "layout/box.h"
#include "layout/layout.h"
#include "plan/conversion.h"

namespace refit {

struct Segment {
  int32_t src_record = 0;  // index into Plan::src.records
  int32_t dst_record = 0;  // index into Plan::dst.records
  Box box;                 // global coordinates of the tensor
  int64_t bytes = 0;       // elements * element size
};

struct Message {
  // A trainer rank, or an engine rank when `relay` (see the top comment).
  int32_t src_rank = 0;
  int32_t dst_rank = 0;
  int32_t wave = 0;
  // Segments, in pack order: Plan::segments[first_segment, +num_segments).
  int32_t first_segment = 0;
  int32_t num_segments = 0;
  int64_t bytes = 0;
  // If set, the packed bytes are exactly this range of that buffer, so the
  // side sends from / receives into the buffer directly (no staging).
  bool src_contiguous = false;
  int32_t src_buffer = -1;  // index into Plan::src.buffers when contiguous
  int64_t src_offset = 0;
  bool dst_contiguous = false;
  int32_t dst_buffer = -1;
  int64_t dst_offset = 0;
  // An engine rank forwards bytes it received in an earlier wave: src_rank
  // is an engine rank, src_record/src_buffer index Plan::dst.
  bool relay = false;
};

struct Wave {
  int32_t lane = 0;   // 0..num_lanes-1
  int32_t stage = 0;  // source pipeline stage whose bytes this wave moves
  // Messages[first_message, +num_messages), sorted by (relay, src_rank,
  // dst_rank) (trainer senders first, then relaying engine ranks);
  // one pair's messages in a wave keep their order (the i-th send of a
  // pair matches the i-th receive).
  int32_t first_message = 0;
  int32_t num_messages = 0;
  // The whole plan's bytes in this wave (every message's, every rank's),
  // and in the waves before it on its lane. A slice (plan_codec.h) keeps
  // the whole plan's figures, so every rank cuts the same delta batches
  // from its slice alone (exec/delta/delta_runner.h). Derived from the
  // messages (SetWaveBytes, plan/wave_bytes.h).
  int64_t plan_bytes = 0;
  int64_t lane_offset = 0;
};

// Lanes a plan may have: each lane is a data-plane communicator per member,
// so a count far beyond what a job uses is refused.
inline constexpr int32_t kMaxLanes = 64;

// Link speeds per class, GB/s (1e9 bytes per second) per GPU and
// direction (plan/cost.h).
struct LinkSpeeds {
  // A device-local copy, source and destination on one GPU (one H200
  // copied 16.38 GB in 8.57 ms: docs/benchmarks.md, colocated_bench).
  double same_gpu_gbps = 1900.0;
  double intra_host_gbps = 370.0;  // NVLink between GPUs of one host
  double inter_host_gbps = 50.0;   // the network between hosts
};

struct PlannerOptions {
  // Staging bytes one rank may use per lane (pack + unpack staging of one
  // wave together). Total staging per rank <= staging_budget_bytes.
  int64_t staging_budget_bytes = 512LL << 20;
  int32_t num_lanes = 2;  // 1..kMaxLanes
  // Let the planner raise num_lanes to 4 for a plan of mostly staged
  // bytes (many small or strided pieces; planner.h). The plan's
  // options.num_lanes is what it chose; this flag is not part of the plan.
  bool choose_lanes = true;
  // Use the placement (SideLayout::host_of_rank on both sides, and
  // gpu_of_rank where given): replica choice minimizes the predicted refit
  // time under `links`. When false, or when a side gives no hosts, every
  // pair counts as inter-host.
  bool prefer_same_host = true;
  LinkSpeeds links;
  // A single message carries at most this many bytes (splitting bigger
  // transfers lets lanes pipeline); 0 = the per-lane staging budget.
  int64_t max_message_bytes = 0;
  // A segment of at least this many bytes that is one contiguous range of
  // its buffer on either side travels as a message of its own, so that
  // side sends from / receives into the buffer with no staging copy; only
  // smaller or doubly strided segments are coalesced. 0: never (every
  // pair's segments are coalesced greedily).
  int64_t direct_min_bytes = 8LL << 20;
  // Bytes (staged or not) one rank sends plus receives in one wave at
  // most; a message larger than this gets a wave to itself. Keeps waves,
  // and with them lane pipelining, even when most messages need no
  // staging. 0 = the per-lane staging budget.
  int64_t max_wave_bytes = 0;
  // Edge of the FP8 block-quantization tiles (weight_scale_inv blocks).
  int64_t fp8_block = 128;
  // Let engine ranks forward bytes they received to other engine ranks
  // (relays, planner.h): the trainer then sends each distinct byte about
  // once and replicas feed each other, so the refit time stays flat in the
  // number of engine replicas. false: every byte comes from a trainer rank
  // (the plans every data plane runs: colocated pull and delta rounds
  // take no relays).
  bool relay = false;
  // Plan for delta rounds (refitd --delta): waves and messages of at most
  // half a lane's staging share, so that a delta runner's lane holds a
  // batch's packed messages and their encodings within the budget
  // (exec/delta/delta_room.h); without it a full wave's messages go dense.
  // Seen in the plan through max_wave_bytes and max_message_bytes.
  bool delta = false;
  // When set and true, BuildPlan stops after its current phase with
  // CANCELLED (refitd sets it when it stops). Not part of the plan.
  const std::atomic<bool>* cancel = nullptr;
};

struct PlanStats {
  int64_t total_bytes = 0;
  int64_t num_segments = 0;
  int64_t num_messages = 0;
  int64_t num_waves = 0;
  std::vector<int64_t> bytes_sent;      // per src rank
  std::vector<int64_t> bytes_received;  // per dst rank
  // Per dst rank, the bytes it forwards to other engine ranks (relay
  // messages it sends); all zero without relays.
  std::vector<int64_t> bytes_forwarded;
  std::vector<int64_t> staging_src;     // peak staging per src rank (all lanes)
  std::vector<int64_t> staging_dst;     // peak staging per dst rank (all lanes)
  // The time model of plan/cost.h over the plan's placement: the slowest
  // rank's predicted seconds; a lower bound no replica choice can beat
  // (per destination rank its bytes over the best link any replica offers;
  // per source rank the bytes only it holds; per replica group the bytes
  // asked of it plus its ranks' own, shared evenly by its ranks; all bytes
  // shared by all source ranks; each byte over the best link it could
  // use); and the
  // bytes per link class: between ranks on one GPU, between other ranks
  // of one host, and across hosts (the three add up to total_bytes). Not
  // part of the fingerprint; zero for a plan read from the wire.
  // With options.relay the model counts each engine rank's ingress and
  // egress apart (full duplex: its time is the larger) and the bound is
  // the relay-aware one (each engine rank's bytes over the best link any
  // holder offers; each distinct byte leaving the trainer side at least
  // once); sender_lower_bound_seconds is always the bound with trainer
  // ranks as the only sources (equal to lower_bound_seconds without
  // relays). relay_depth: the most hops a byte takes after leaving the
  // trainer side beyond the first (0: no relays).
  double predicted_seconds = 0;
  double lower_bound_seconds = 0;
  double sender_lower_bound_seconds = 0;
  int32_t relay_depth = 0;
  int64_t same_gpu_bytes = 0;
  int64_t intra_host_bytes = 0;
  int64_t inter_host_bytes = 0;
  // Wall seconds BuildPlan spent per phase, in order ("validate", ...);
  // empty for a plan read from the wire. Not part of the fingerprint.
  std::vector<std::pair<std::string, double>> phase_seconds;
};

struct Plan {
  // As given (validated), with conversions applied (ConvertSource).
  SideLayout src;
  SideLayout dst;
  // dst tensor index -> src tensor index (same name).
  std::vector<int32_t> dst_to_src_tensor;
  // Every segment belongs to exactly one message, whose segments are
  // contiguous here. BuildPlan orders them by (pair, message); a slice
  // (ExtractSlice) by message.
  std::vector<Segment> segments;
  std::vector<Message> messages;  // by (wave, src rank, dst rank, seq)
  std::vector<Wave> waves;
  // What the senders compute before their waves (plan/conversion.h): the
  // converted values of their records, and first the partial amaxes of the
  // FP8 tiles their records cut. Sorted by source rank.
  std::vector<Conversion> conversions;
  std::vector<CutTileGroup> cut_tiles;
  PlannerOptions options;
  PlanStats stats;
  // Hex digest of the canonical serialization: equal inputs give equal
  // fingerprints.
  std::string fingerprint;
};

}  // namespace refit

#endif  // REFIT_PLAN_PLAN_H_
