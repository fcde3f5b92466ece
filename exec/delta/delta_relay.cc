// DeltaRunner's relays (see delta_runner.h, Relays): an engine rank
// forwards what it received, repeating the encoded payload where its
// forward carries the same region to a rank of the same base, else the
// dense bytes of its own buffer (a sub-region or a union of what it
// received included); a trainer digests the relayed copies of its bytes.
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/delta/delta_codec.h"
#include "exec/delta/delta_runner.h"
#include "plan/relay_roots.h"

namespace refit {
namespace {

constexpr int64_t kHeader = sizeof(DeltaHeader);

DeltaHeader DenseHeader(int word_bytes, int64_t bytes) {
  DeltaHeader h;
  const int64_t n = bytes / word_bytes;
  h.encoding = static_cast<uint8_t>(DeltaEncoding::kDense);
  h.word_bytes = static_cast<uint8_t>(word_bytes);
  h.num_words = static_cast<uint64_t>(n);
  h.num_changed = static_cast<uint64_t>(n);
  h.payload_bytes = static_cast<uint64_t>(DeltaPayloadBytes(DeltaEncoding::kDense, word_bytes, n, n));
  return h;
}

// Where the bytes of `region` of engine rank `rank`'s record `record`
// first left a trainer rank, as of plan wave `wave`: per part, the
// trainer's message, its segment (index within it) and the part, following
// relays back hop by hop through earlier waves only. Parts no earlier
// message of the plan (a slice) delivers are left out.
void TraceToTrainer(const Plan& plan, const RelayArrivals& arrivals, int32_t rank,
                    int32_t record, const Box& region, int32_t wave,
                    std::vector<RelayArrivals::Part>* out) {
  for (RelayArrivals::Part& p : arrivals.PartsOf(rank, record, region)) {
    const Message& g = plan.messages[p.message];
    if (g.wave >= wave) continue;
    if (!g.relay) {
      out->push_back(std::move(p));
    } else {
      const Segment& up = plan.segments[g.first_segment + p.segment];
      TraceToTrainer(plan, arrivals, g.src_rank, up.src_record, p.box, g.wave, out);
    }
  }
}

}  // namespace

absl::Status DeltaRunner::PrepareRelays(const Plan& plan, bool src,
                                        std::map<std::pair<int32_t, int32_t>, int32_t>* slots) {
  const RelayArrivals arrivals(plan);
  if (!src) {
    // Each forward's segments must be regions earlier batches of this rank
    // brought whole (as one segment, or in parts); where every segment
    // repeats the same segment of one message received, that message is
    // its source.
    std::map<int32_t, std::pair<MsgWork*, int32_t>> received;  // message -> (work, batch)
    for (int32_t k = 0; k < static_cast<int32_t>(work_.size()); ++k) {
      for (MsgWork& m : work_[k].msgs) received[m.message] = {&m, k};
    }
    for (int32_t k = 0; k < static_cast<int32_t>(work_.size()); ++k) {
      for (MsgWork& f : work_[k].forwards) {
        const Message& fm = plan.messages[f.message];
        int32_t source = -1;
        bool same = true;
        for (int32_t i = 0; i < fm.num_segments; ++i) {
          const Segment& seg = plan.segments[fm.first_segment + i];
          bool covered = false;
          const std::vector<RelayArrivals::Part> parts =
              arrivals.PartsOf(rank_, seg.src_record, seg.box, &covered);
          for (const RelayArrivals::Part& p : parts) {
            auto it = received.find(p.message);
            covered = covered && it != received.end() && it->second.second < k;
          }
          if (!covered || parts.empty()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "engine rank ", rank_, " relays tensor ",
                plan.dst.tensors[plan.dst.records[seg.dst_record].tensor].name, " box ",
                seg.box.ToString(), " to engine rank ", fm.dst_rank, " in plan wave ", fm.wave,
                ": no earlier wave brings it all that region"));
          }
          if (i == 0) source = parts[0].message;
          same = same && parts.size() == 1 && parts[0].box == seg.box &&
                 parts[0].message == source && parts[0].segment == i;
        }
        auto src_it = received.find(source);
        if (same && src_it != received.end() &&
            plan.messages[source].num_segments == fm.num_segments &&
            src_it->second.first->bytes == f.bytes &&
            src_it->second.first->word_bytes == f.word_bytes) {
          f.source = source;
          ++src_it->second.first->repeats;
        }
      }
    }
    return absl::OkStatus();
  }
  // Trainer: every relayed copy of bytes it sent (traced back hop by hop,
  // a part of a segment at a time, to the message it sent) is digested
  // from its stream at the place the copy lands.
  std::map<int32_t, MsgWork*> mine;
  for (BatchWork& w : work_) {
    for (MsgWork& m : w.msgs) mine[m.message] = &m;
  }
  for (const Message& f : plan.messages) {
    if (!f.relay) continue;
    for (int32_t i = 0; i < f.num_segments; ++i) {
      const Segment& seg = plan.segments[f.first_segment + i];
      std::vector<RelayArrivals::Part> roots;
      TraceToTrainer(plan, arrivals, f.src_rank, seg.src_record, seg.box, f.wave, &roots);
      for (const RelayArrivals::Part& p : roots) {
        auto root = mine.find(p.message);
        if (root == mine.end()) continue;  // another trainer rank's
        const Message& r = plan.messages[p.message];
        int64_t offset = 0;
        for (int32_t j = 0; j < p.segment; ++j) offset += plan.segments[r.first_segment + j].bytes;
        std::vector<StreamDigestRun> runs;
        REFIT_RETURN_IF_ERROR(AppendRegionDigestRuns(
            plan, f.dst_rank, seg.dst_record, plan.segments[r.first_segment + p.segment].box,
            offset, p.box, &runs));
        MsgWork& m = *root->second;
        for (const StreamDigestRun& run : runs) {
          auto [slot, fresh] = slots->emplace(std::make_pair(run.engine_rank, run.tensor),
                                              static_cast<int32_t>(digest_keys_.size()));
          if (fresh) digest_keys_.push_back(slot->first);
          m.runs.push_back(run);
          m.run_slots.push_back(slot->second);
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SendOp>> DeltaRunner::ForwardSends(BatchWork& w,
                                                              absl::Time deadline) {
  // The lane's staging, and every earlier batch's bytes in place (applied
  // and unpacked on whichever lane brought them): each lane's receives
  // first (a peer that never sends is named by the transport), then its
  // copies and applies.
  REFIT_RETURN_IF_ERROR(ClaimFor(w, deadline));
  for (int32_t lane = 0; lane < static_cast<int32_t>(lane_used_.size()); ++lane) {
    if (lane == w.lane || !lane_used_[lane]) continue;
    REFIT_RETURN_IF_ERROR(DrainLane(lane, deadline));
    REFIT_RETURN_IF_ERROR(copier_->Sync(lane, deadline));
    REFIT_RETURN_IF_ERROR(ops_->Sync(lane, deadline));
  }
  auto mode_of = [this](int32_t engine_rank) {
    return static_cast<size_t>(engine_rank) < modes_.size() ? modes_[engine_rank]
                                                            : EngineDeltaMode{};
  };
  const EngineDeltaMode own = mode_of(rank_);
  std::vector<ResolvedCopy> packs;
  std::vector<SendOp> payloads;
  // A repeat goes only where it fits the receiver's room (w.forward_caps,
  // the peers in w.forwards' order); else the forward is dense.
  std::vector<int64_t> peer_left = w.forward_caps;
  size_t peer = 0;
  int32_t of_peer = 0;
  for (size_t i = 0; i < w.forwards.size(); ++i) {
    for (; of_peer == w.forward_peers[peer].second; of_peer = 0) ++peer;
    ++of_peer;
    MsgWork& f = w.forwards[i];
    auto held = f.source >= 0 ? held_.find(f.source) : held_.end();
    const bool kept = held != held_.end() && held->second.valid;
    if (kept) --held->second.remaining;
    const EngineDeltaMode down = mode_of(f.engine_rank);
    bool repeat = kept && !own.dense && !down.dense && down.base_version == own.base_version;
    if (repeat) {
      const int64_t need = (static_cast<int64_t>(held->second.header.payload_bytes) + 15) / 16 * 16;
      repeat = need <= peer_left[peer];
      if (repeat) {
        peer_left[peer] -= need;
      } else {
        ++delta_stats_.dense_for_room;
      }
    }
    if (repeat) {
      f.header = held->second.header;
      f.payload = held->second.data;
    } else {
      f.header = DenseHeader(f.word_bytes, f.bytes);
      f.payload = f.direct != nullptr ? f.direct : w.staging + f.stage_offset;
      if (f.direct == nullptr) {
        REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> c,
                               ResolveTasks(f.tasks, buffers_, {}, nullptr, f.payload));
        packs.insert(packs.end(), c.begin(), c.end());
      }
    }
    w.forward_host[i] = f.header;
    // Each payload on its own: the receiver joins none from a relay.
    const int64_t p = static_cast<int64_t>(f.header.payload_bytes);
    if (p > 0) payloads.push_back({f.peer, f.payload, p});
    delta_stats_.forwarded_bytes += kHeader + p;
    if (!repeat) delta_stats_.forwarded_dense_bytes += p;
  }
  if (!packs.empty()) {
    REFIT_RETURN_IF_ERROR(copier_->Copy(w.lane, packs));
    if (!copier_->OrderedWithTransport()) REFIT_RETURN_IF_ERROR(copier_->Sync(w.lane, deadline));
  }
  // The headers from the host (a device's copy reads host memory).
  REFIT_RETURN_IF_ERROR(ops_->Copy(w.lane, w.forward_headers,
                                   reinterpret_cast<const char*>(w.forward_host.data()),
                                   static_cast<int64_t>(w.forward_host.size()) * kHeader));
  if (!ops_->OrderedWithTransport()) REFIT_RETURN_IF_ERROR(ops_->Sync(w.lane, deadline));
  std::vector<SendOp> sends;
  int64_t first = 0;
  for (const auto& [peer, count] : w.forward_peers) {
    sends.push_back({peer, w.forward_headers + first * kHeader, count * kHeader});
    first += count;
  }
  w.forward_payloads = std::move(payloads);
  return sends;
}

absl::Status DeltaRunner::KeepPayloads(BatchWork& w) {
  for (MsgWork& m : w.msgs) {
    if (m.repeats == 0 || m.header.encoding == static_cast<uint8_t>(DeltaEncoding::kDense)) {
      continue;
    }
    const int64_t p = static_cast<int64_t>(m.header.payload_bytes);
    // No room left in the ring: its forwards go dense.
    Held* h = RingTake(m.message, p, m.repeats);
    if (h == nullptr) continue;
    REFIT_RETURN_IF_ERROR(ops_->Copy(w.lane, h->data, m.payload, p));
    h->header = m.header;
  }
  return absl::OkStatus();
}

void DeltaRunner::ForwardsPosted(const BatchWork& w) {
  for (const MsgWork& f : w.forwards) {
    auto held = f.source >= 0 ? held_.find(f.source) : held_.end();
    if (held == held_.end() || !held->second.valid || held->second.remaining > 0 ||
        held->second.ticket >= 0) {
      continue;
    }
    held->second.lane = w.lane;
    held->second.ticket = posted_[w.lane];
  }
}

}  // namespace refit
