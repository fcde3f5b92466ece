// BuildPlan: the planner, a pure function from two layouts to a Plan.
// Its phases are in plan/internal/; fingerprints in plan/fingerprint.h,
// statistics in plan/plan_stats.h.
#ifndef REFIT_PLAN_PLANNER_H_
#define REFIT_PLAN_PLANNER_H_

#include "absl/status/statusor.h"
#include "layout/layout.h"
#include "plan/plan.h"

namespace refit {

// Builds the transfer plan that fills every destination record from the
// source records of the same tensor name.
//
// Fails with INVALID_ARGUMENT, naming tensor, box and ranks, when: a record
// is invalid (ValidateRecord); a dst tensor has no src tensor of that name,
// or their shapes or dtypes differ; a destination box has no source, or is
// covered twice on one dst rank's buffers; two records overlap in one
// destination buffer; a destination buffer byte is claimed by no record and
// not declared padding. All errors found are reported, one per line.
//
// Normalization: records that hold one dim-0 index each of a tensor on one
// rank, in evenly spaced buffers at the same offset with the same in-buffer
// layout (Megatron's TEGroupedMLP keeps one parameter per local expert),
// are merged into one indexed record (Record::buffer_step). plan.src and
// plan.dst are the layouts as given with these merges; buffers and tensors
// are unchanged. A DeepSeek-V3 trainer rank then has one record per expert
// weight and layer, not one per expert.
//
// Coverage is checked per destination buffer, exactly (sorted byte runs);
// a buffer whose byte layout (size, padding, each record part's offset,
// element size and dim maps) equals one already found fine is not checked
// again, nor is a buffer one record fills contiguously.
//
// Replica choice (deterministic greedy): every (dst record, disjoint source
// piece) intersection is a candidate. Candidates with one replica are
// assigned first. The others are processed by bytes descending, then dst
// record index, then source piece; each goes to a replica on the dst
// rank's own GPU when there is one (gpu_of_rank; among several, by the
// rule that follows), else to the replica that makes the
// larger of its src rank's and its dst rank's predicted time smallest
// (plan/cost.h: a rank's bytes per link class of the pair, at options.links'
// speeds: same GPU where gpu_of_rank names one GPU for both, same host by
// host_of_rank, else inter-host; without hosts on both sides, or with
// options.prefer_same_host false, every pair is inter-host and this
// balances bytes among source ranks), times below the lower bound (or the
// slowest rank so far) counting as equal; ties go to the replica over the
// faster link (same GPU, then the dst rank's host, with the default
// speeds), then to the src rank with the least predicted time, then to the
// lowest src rank (then lowest record index). plan.stats has the predicted
// refit time, a lower bound and the bytes per link class.
// Overlapping (non-identical) source boxes are cut into disjoint grid
// cells, so every element is sent exactly once.
//
// Relays (options.relay): the candidates of one source piece whose
// destination records need the same region of it (a unit: replicas of one
// part, or, between replicas of different layouts such as TP8 and TP4,
// the regions the piece cuts both to alike) need the same bytes, so an
// engine rank holding them may forward them (a relay message, plan.h).
// The bytes are identical because a dst tensor has one dtype and one set
// of values: FP8, MXFP8 and NVFP4 codes and scales are computed on the
// tensor's global tile grid and move as bytes, never quantized again. Source choice then follows
// internal_plan::ChooseRelaySources (plan/internal/relays.h): chains
// (each unit's engine ranks host by host, the first fed by a trainer rank,
// each other by a trainer rank or the rank before it, at most
// kMaxChainDepth hops); trees where chains predict over kChainSlack times
// the relay-aware bound
// (replicas on the dst rank's GPU first; one root per unit from a trainer
// rank; every other candidate from a trainer rank or from an engine rank
// of its unit already holding the bytes, at most kMaxRelayDepth hops).
// Either way each choice keeps the larger of the two ranks' predicted
// times smallest, with an engine rank's received and forwarded bytes
// counted apart (full duplex), ties to the faster link (a relay inside a
// host before the network), then to fewer hops. The trainer's messages
// are placed as below; then, hop by hop, each relayed segment is ready one
// wave after the wave that brought its relaying rank the same region, a
// relay pair's segments are ordered by ready wave and coalesced the same
// way, and each relay message is placed at the first wave at or after its
// ready wave where both engine ranks have room (waves are appended when
// none has). Where relays carry at least half of an engine rank's bytes
// the plan pipelines (plan/internal/budgets.h SetRelayCaps): waves sized
// by the chains' depth, messages a quarter wave, one delivering wave per
// relay message; plan.options.max_wave_bytes / max_message_bytes record
// the caps chosen.
// plan.stats has both lower bounds (relay-aware, and trainer ranks as the
// only senders), the relay depth and the bytes each engine rank forwards.
// Without relays the plan is exactly the plan built before relays existed
// (same fingerprint).
//
// Segments larger than min(max_message_bytes or the per-lane budget, the
// per-lane budget) are split along their outermost dim with extent > 1.
// Segments of one (stage, src rank, dst rank) are ordered by (dst buffer,
// dst byte offset). A segment of at least options.direct_min_bytes that is
// one contiguous byte range of its buffer on either side is a message of
// its own (that side needs no staging); the others are packed greedily, in
// order, into messages of at most that cap.
// Lanes: options.num_lanes, or 4 when options.choose_lanes is set, fewer
// were asked for, and the heaviest rank's segments below direct_min_bytes
// (many small or strided pieces, which it packs or unpacks) come to at
// least 4 per-lane budgets, at least 256 MiB and at least half of its
// bytes (and the budget gives each of 4 lanes 16 MiB): with two lanes a
// lane's pack and unpack cannot hide behind the other lane's transfer.
// plan.options.num_lanes is the count chosen; members run that many
// (refitd bootstraps them with it).
// Messages go next-fit into waves of their stage (stage =
// src.stage_of_rank[src rank], 0 if empty) so that per wave each rank's
// staging (bytes of its non-contiguous sends + receives) is <=
// staging_budget_bytes / num_lanes and all its bytes are <= max_wave_bytes
// (or that per-lane budget; a message bigger than that alone in a wave);
// a pair's messages keep their order (the i-th send of a pair in a wave
// matches its i-th receive). Next fit: a message starts at the first wave,
// not before its pair's previous message, in which both ranks have room,
// and a rank never returns to a wave that one of its messages did not fit
// in. Waves of different stages are interleaved (wave k of each stage in
// stage order); lane = stage % num_lanes when there are >= 2 stages, else
// wave index % num_lanes.
// A plan with conversions (plan.conversions not empty) keeps a part of
// each delta lane room free of its waves' bytes (plan/delta_lane.h:
// QuantizeRoom, at most 4 MiB): max_wave_bytes and max_message_bytes are
// at most DeltaLaneRoom - QuantizeRoom (plan/internal/budgets.h
// SetQuantizeCaps; plan.options records the caps), so that a delta
// round's trainer rank quantizes its batches' rows within the staging
// budget.
//
// Cost: linear in records and candidates apart from per-tensor and
// per-pair sorts; plan.stats.phase_seconds has the time of each phase.
//
// Fails with INVALID_ARGUMENT also for invalid options (num_lanes outside
// 1..kMaxLanes, budget < 1, per-lane budget smaller than one element, a link
// speed not positive). INTERNAL, naming an engine rank and tensor, if the
// source choice left a transfer without a source (a planner bug: it never
// hands out a plan that would leave engine bytes unwritten).
//
// The layouts are taken by value: pass them with std::move when they are
// not needed afterwards, and the plan takes them over without a copy (a
// DeepSeek-V3 engine layout is ~100 MB).
absl::StatusOr<Plan> BuildPlan(SideLayout src, SideLayout dst,
                               const PlannerOptions& options);

}  // namespace refit

#endif  // REFIT_PLAN_PLANNER_H_
