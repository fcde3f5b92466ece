// DeltaRunner: delta and verified rounds, batch by batch: headers, then
// payloads, then apply in place (the batches themselves: delta_waves.cc).
#include "exec/delta/delta_runner.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/convert/amax_exchange.h"
#include "exec/delta/delta_codec.h"
#include "exec/program/message_place.h"
#include "exec/program/plan_side.h"
#include "layout/dtype.h"
#include "plan/wave_bytes.h"

namespace refit {
namespace {

// The codec's word for a message: the gcd of its engine element sizes, 1
// unless that is 1, 2, 4 or 8 (FP8 codes with f32 scales: 1).
int MessageWordBytes(const Plan& plan, const Message& m) {
  int64_t g = 0;
  for (int32_t i = 0; i < m.num_segments; ++i) {
    const Segment& seg = plan.segments[m.first_segment + i];
    const Record& r = plan.dst.records[seg.dst_record];
    g = std::gcd(g, DTypeSize(plan.dst.tensors[r.tensor].dtype));
  }
  return g == 2 || g == 4 || g == 8 ? static_cast<int>(g) : 1;
}

// Wave `index`'s batch, as a key ordering the batches. With a window
// (DeltaRunner::BatchWindow) above 0: the window its whole-plan offset on
// its lane falls in, then its lane (a batch is a lane's waves within one
// window); otherwise its own place (every wave its own batch). A slice
// keeps the whole plan's offsets and its waves' order, so every rank's
// batches are the whole plan's, run in the whole plan's order.
// A wave reaching past its window's end is a batch of its own, after the
// window's other waves of its lane (it starts after them).
std::tuple<int64_t, int64_t, int> BatchKey(const Wave& wave, int64_t index, int64_t window) {
  if (window <= 0) return {index, 0, 0};
  const int64_t k = wave.lane_offset / window;
  const bool past = wave.lane_offset - k * window + wave.plan_bytes > window;
  return {k, wave.lane, past ? 1 : 0};
}

// A trainer begins the counts of up to this many batches past the one it
// encodes: enough queued on the GPU that the host's posting, whose time
// varies, never leaves the counts' stream idle. On one lane they and the
// one encoding take kCountsAhead + 1 of its kMaxCountsInFlight slots.
constexpr size_t kCountsAhead = 5;
static_assert(kCountsAhead + 1 <= kMaxCountsInFlight, "a lane holds the counts begun ahead");

}  // namespace

std::string DeltaRunner::SourceKey(const Plan& plan, const Message& m) {
  std::string key;
  auto put = [&key](int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(m.bytes);
  for (int32_t i = 0; i < m.num_segments; ++i) {
    const int32_t si = m.first_segment + i;
    if (si < 0 || static_cast<size_t>(si) >= plan.segments.size()) continue;
    const Segment& seg = plan.segments[si];
    put(seg.src_record);
    for (int64_t o : seg.box.origin()) put(o);
    for (int64_t n : seg.box.shape()) put(n);
  }
  return key;
}

int64_t DeltaRunner::SnapshotBytes(const Plan& plan, int32_t trainer_rank) {
  std::set<std::string> seen;
  int64_t total = 0;
  for (const Message& m : plan.messages) {
    if (!m.relay && m.src_rank == trainer_rank && seen.insert(SourceKey(plan, m)).second) total += m.bytes;
  }
  return total;
}

absl::StatusOr<std::unique_ptr<DeltaRunner>> DeltaRunner::Create(
    const Plan& plan, Side side, int32_t rank, std::vector<char*> buffers,
    Transport* transport, DeltaRunnerOptions options) {
  const bool src = side == Side::kTrainer;
  const SideLayout& layout = src ? plan.src : plan.dst;
  const std::string side_name(SideName(side));
  if (transport == nullptr) return absl::InvalidArgumentError("delta runner needs a transport");
  if (rank < 0 || rank >= layout.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(side_name, " rank ", rank,
                                                   " outside world size ", layout.world_size));
  }
  std::unique_ptr<DeltaRunner> r(new DeltaRunner());
  if (options.copier == nullptr) {
    r->host_copier_ = MakeHostCopier();
    options.copier = r->host_copier_.get();
  }
  if (options.ops == nullptr) {
    r->host_ops_ = MakeHostWaveOps();
    options.ops = r->host_ops_.get();
  }
  const MemoryKind kind = transport->memory_kind();
  if (transport->rank() != GlobalRank(plan, side, rank) || options.copier->kind() != kind ||
      options.ops->kind() != kind) {
    return absl::FailedPreconditionError(absl::StrCat(
        side_name, " rank ", rank, ": the delta runner needs a transport of global rank ",
        GlobalRank(plan, side, rank), " and a copier and codec of its memory kind"));
  }
  if (src && options.max_snapshot_bytes > 0 &&
      SnapshotBytes(plan, rank) > options.max_snapshot_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "trainer rank ", rank, " needs a delta snapshot of ", SnapshotBytes(plan, rank),
        " bytes, above the bound of ", options.max_snapshot_bytes, " (max_snapshot_bytes)"));
  }
  r->plan_ = &plan;
  r->side_ = side;
  r->rank_ = rank;
  r->transport_ = transport;
  r->copier_ = options.copier;
  r->ops_ = options.ops;
  r->options_ = options;
  r->in_flight_.assign(transport->num_lanes(), 0);
  if (options.snapshot != nullptr) r->snapshot_ = options.snapshot;
  if (r->snapshot_->plan_fingerprint != plan.fingerprint) {
    *r->snapshot_ = DeltaSnapshot();
    r->snapshot_->plan_fingerprint = plan.fingerprint;
  }
  buffers.resize(layout.buffers.size(), nullptr);
  r->buffers_ = std::move(buffers);
  if (src) REFIT_RETURN_IF_ERROR(r->PrepareConversions(plan));
  REFIT_RETURN_IF_ERROR(r->Prepare(plan, src));
  return r;
}

absl::Status DeltaRunner::PrepareConversions(const Plan& plan) {
  Copier* copier = copier_;
  REFIT_ASSIGN_OR_RETURN(
      conversions_,
      ConversionStage::CreateUnplaced(plan, rank_, [copier] { return copier->MakeConvertOps(0); },
                                      buffers_));
  if (conversions_ == nullptr) return absl::OkStatus();
  for (int32_t lane = 0; lane < transport_->num_lanes(); ++lane) {
    lane_convert_.push_back(copier->MakeConvertOps(lane));
    if (lane_convert_.back() == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trainer rank ", rank_, ": this data plane cannot convert on lane ", lane));
    }
  }
  convert_buffers_ = buffers_;
  for (int32_t k = 0; k < conversions_->size(); ++k) {
    const Conversion& c = conversions_->conversion(k);
    for (int32_t b : {c.to_buffer, c.scale_buffer, c.global_buffer}) {
      if (b >= 0) writers_[b].push_back(k);
    }
  }
  return absl::OkStatus();
}

absl::Status DeltaRunner::Prepare(const Plan& plan, bool src) {
  const std::string side_name(SideName(side_));
  std::map<std::pair<int32_t, int32_t>, int32_t> slots;
  for (const Wave& wave : plan.waves) {
    if (wave.first_message < 0 || wave.num_messages < 0 ||
        int64_t{wave.first_message} + wave.num_messages >
            static_cast<int64_t>(plan.messages.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          side_name, " rank ", rank_, ": a wave's messages lie outside the plan"));
    }
  }
  if (absl::Status s = CheckWaveBytes(plan); !s.ok()) {
    return AnnotateStatus(s, absl::StrCat(side_name, " rank ", rank_));
  }
  // Batches (BatchKey): cut by the whole plan's bytes, which every slice
  // carries, so every rank cuts the same batches and runs them in one
  // order whatever its slice, and a pair's sends and receives match.
  const int32_t lanes = transport_->num_lanes();
  std::vector<BatchWork> batches;
  std::map<std::tuple<int64_t, int64_t, int>, size_t> batch_of;
  const int64_t window = BatchWindow(plan);
  for (size_t k = 0; k < plan.waves.size(); ++k) {
    const Wave& wave = plan.waves[k];
    const auto key = BatchKey(wave, static_cast<int64_t>(k), window);
    auto [at, fresh] = batch_of.emplace(key, batches.size());
    if (fresh) {
      batches.emplace_back();
      batches.back().lane = std::max(0, wave.lane) % lanes;
      // A window's waves move at most the window's bytes; a wave alone at
      // most what the planner lets one rank move in a wave (PairBound).
      batches.back().window = std::get<2>(key) == 0 ? window : 0;
      batches.back().wave_bytes = wave.plan_bytes;
    }
    BatchWork& w = batches[at->second];
    const size_t before = w.msgs.size(), forwards_before = w.forwards.size();
    for (int32_t mi = wave.first_message; mi < wave.first_message + wave.num_messages; ++mi) {
      const Message& m = plan.messages[mi];
      // A trainer sends its messages; an engine receives its own and
      // forwards its relays (from its own buffers).
      const bool sends = m.src_rank == rank_ && m.relay != src;
      if (!sends && !(!src && m.dst_rank == rank_)) continue;
      MsgWork mw;
      mw.message = mi;
      mw.engine_rank = m.dst_rank;
      mw.peer = sends ? GlobalRank(plan, Side::kEngine, m.dst_rank)
                      : GlobalRank(plan, m.relay ? Side::kEngine : Side::kTrainer, m.src_rank);
      mw.bytes = m.bytes;
      mw.word_bytes = MessageWordBytes(plan, m);
      if (src) mw.source_key = SourceKey(plan, m);
      if (src && conversions_ != nullptr) REFIT_RETURN_IF_ERROR(NoteConversions(plan, m, mw));
      if (!mw.converted) {
        REFIT_ASSIGN_OR_RETURN(MessagePlace place,
                               PlaceMessage(plan, m, sends, src ? plan.src : plan.dst, buffers_,
                                            absl::StrCat(side_name, " rank ", rank_)));
        mw.direct = place.direct;
        mw.tasks = std::move(place.tasks);
      }
      if (sends && !src) {
        w.forwards.push_back(std::move(mw));
        continue;
      }
      REFIT_RETURN_IF_ERROR(AppendStreamDigestRuns(plan, m, &mw.runs));
      for (const StreamDigestRun& run : mw.runs) {
        auto [it, fresh] = slots.emplace(std::make_pair(run.engine_rank, run.tensor),
                                         static_cast<int32_t>(digest_keys_.size()));
        if (fresh) digest_keys_.push_back(it->first);
        mw.run_slots.push_back(it->second);
      }
      w.dense_bytes += m.bytes;
      w.msgs.push_back(std::move(mw));
    }
    if (w.msgs.size() + w.forwards.size() > before + forwards_before) ++w.plan_waves;
  }
  // By peer, then message: each peer's headers are one send.
  auto by_peer = [](std::vector<MsgWork>& msgs, std::vector<std::pair<int32_t, int32_t>>* peers) {
    std::stable_sort(msgs.begin(), msgs.end(),
                     [](const MsgWork& a, const MsgWork& b) { return a.peer < b.peer; });
    for (const MsgWork& m : msgs) {
      if (peers->empty() || peers->back().first != m.peer) peers->push_back({m.peer, 0});
      ++peers->back().second;
    }
  };
  for (const auto& [key, index] : batch_of) {
    BatchWork& w = batches[index];
    if (w.msgs.empty() && w.forwards.empty()) continue;
    by_peer(w.msgs, &w.peers);
    by_peer(w.forwards, &w.forward_peers);
    const int64_t header_bytes = static_cast<int64_t>(w.msgs.size()) * sizeof(DeltaHeader);
    REFIT_ASSIGN_OR_RETURN(w.headers, ops_->Allocate(header_bytes));
    header_bytes_ += header_bytes;
    if (!w.forwards.empty()) {
      const int64_t forward_bytes = static_cast<int64_t>(w.forwards.size()) * sizeof(DeltaHeader);
      REFIT_ASSIGN_OR_RETURN(w.forward_headers, ops_->Allocate(forward_bytes));
      header_bytes_ += forward_bytes;
      w.forward_host.resize(w.forwards.size());
    }
    work_.push_back(std::move(w));
  }
  REFIT_RETURN_IF_ERROR(PrepareRelays(plan, src, &slots));
  REFIT_RETURN_IF_ERROR(PlanRooms(plan));
  REFIT_RETURN_IF_ERROR(AllocateRooms());
  std::vector<int32_t> last(lanes, -1);
  for (int32_t k = 0; k < static_cast<int32_t>(work_.size()); ++k) {
    const int32_t lane = work_[k].lane;
    if (last[lane] >= 0) work_[last[lane]].next_on_lane = k;
    last[lane] = k;
  }
  return absl::OkStatus();
}

DeltaRunner::~DeltaRunner() {
  if (ops_ != nullptr) (void)ops_->Finish(absl::Now() + absl::Seconds(10));
  for (BatchWork& w : work_) {
    if (w.headers != nullptr) ops_->Free(w.headers);
    if (w.forward_headers != nullptr) ops_->Free(w.forward_headers);
  }
  for (char* p : lane_room_) {
    if (p != nullptr) copier_->Free(p);
  }
  if (ring_ != nullptr) copier_->Free(ring_);
  lane_convert_.clear();
  conversions_.reset();
  if (connect_bytes_ != nullptr) ops_->Free(connect_bytes_);
}

absl::Status DeltaRunner::ConnectLanes(absl::Time deadline) {
  std::vector<std::set<int32_t>> peers(in_flight_.size());
  size_t total = 0;
  // Per lane: the peers this rank receives from, and (prefixed by the
  // sign) those it sends to; a trainer only sends.
  for (const BatchWork& w : work_) {
    for (const auto& [peer, count] : w.peers) total += peers[w.lane].insert(peer).second;
    for (const auto& [peer, count] : w.forward_peers) {
      total += peers[w.lane].insert(-1 - peer).second;
    }
  }
  REFIT_ASSIGN_OR_RETURN(connect_bytes_,
                         ops_->Allocate(static_cast<int64_t>(std::max<size_t>(total, 1))));
  char* at = connect_bytes_;
  for (int32_t lane = 0; lane < static_cast<int32_t>(peers.size()); ++lane) {
    std::vector<SendOp> sends;
    std::vector<RecvOp> recvs;
    for (int32_t peer : peers[lane]) {
      if (peer < 0) {
        sends.push_back({-1 - peer, at++, 1});
      } else if (side_ == Side::kTrainer) {
        sends.push_back({peer, at++, 1});
      } else {
        recvs.push_back({peer, at++, 1});
      }
    }
    if (sends.empty() && recvs.empty()) continue;
    // Not a group of the round's (Post counts those); nothing is in flight.
    REFIT_RETURN_IF_ERROR(transport_->StartWave(lane, sends, recvs, deadline));
    REFIT_RETURN_IF_ERROR(transport_->WaitWave(lane, deadline));
  }
  return absl::OkStatus();
}

void DeltaRunner::Cancel(const absl::Status& reason) {
  {
    absl::MutexLock l(&mu_);
    if (cancelled_.ok()) cancelled_ = reason;
  }
  transport_->Cancel(reason);
}

absl::StatusOr<RunStats> DeltaRunner::Run(absl::Time deadline) {
  absl::StatusOr<RunStats> r = RunBatches(deadline);
  // A failed round takes the transport down (NCCL: every lane's
  // communicator aborted), so nothing waits behind a group that will never
  // complete, and the runner is not run again.
  if (!r.ok()) transport_->Cancel(r.status());
  return r;
}

absl::StatusOr<RunStats> DeltaRunner::RunBatches(absl::Time deadline) {
  const absl::Time start = absl::Now();
  round_start_ = start;
  RunStats stats;
  delta_stats_ = DeltaRoundStats();
  delta_stats_.batch_times.resize(work_.size());
  for (size_t k = 0; k < work_.size(); ++k) delta_stats_.batch_times[k].lane = work_[k].lane;
  sent_ = false;
  if (connect_bytes_ == nullptr) REFIT_RETURN_IF_ERROR(ConnectLanes(deadline));
  if (conversions_ != nullptr) {
    REFIT_RETURN_IF_ERROR(ExchangeAmaxes(deadline));
    delta_stats_.amax_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  }
  if (options_.digest) {
    REFIT_RETURN_IF_ERROR(ops_->StartDigests(static_cast<int32_t>(digest_keys_.size())));
  }
  // Batches begin ahead of the one awaited: a trainer's counts up to
  // kCountsAhead batches ahead (the GPU counts them while the host
  // encodes and posts), an engine's headers one batch ahead when it is on
  // another lane (on one lane its receives must follow the sender's order:
  // headers, payloads, next headers).
  const bool src = side_ == Side::kTrainer;
  const size_t n = work_.size();
  size_t begun = 0;
  for (BatchWork& w : work_) w.headers_posted = w.claimed = false;
  // Nothing is in flight between rounds: the lane rooms and the ring are free.
  held_.clear();
  ring_order_.clear();
  ring_used_ = 0;
  lane_use_.assign(lane_use_.size(), 0);
  lane_used_.assign(lane_used_.size(), false);
  // A trainer's batch packs into its lane room once the lane's earlier
  // batches are encoded and sent (their encodings share the room): not
  // begun ahead of them.
  auto can_begin = [this](size_t b, size_t k) {
    if (work_[b].staging == nullptr) return true;
    for (size_t j = k; j < b; ++j) {
      if (work_[j].lane == work_[b].lane) return false;
    }
    return true;
  };
  for (size_t k = 0; k < n; ++k) {
    if (src) {
      while (begun < std::min(n, k + kCountsAhead + 1) && can_begin(begun, k)) {
        REFIT_RETURN_IF_ERROR(BeginSend(work_[begun++], deadline));
      }
    } else {
      if (!work_[k].headers_posted) REFIT_RETURN_IF_ERROR(BeginReceive(work_[k], deadline));
      // Not a batch that forwards: its forwards read what this one brings.
      if (k + 1 < n && work_[k + 1].lane != work_[k].lane && !work_[k + 1].headers_posted &&
          work_[k + 1].forwards.empty()) {
        REFIT_RETURN_IF_ERROR(BeginReceive(work_[k + 1], deadline));
      }
    }
    REFIT_RETURN_IF_ERROR(src ? EndSend(work_[k], deadline, &stats)
                              : EndReceive(work_[k], deadline, &stats));
    stats.waves += work_[k].plan_waves;
    ++delta_stats_.batches;
  }
  const absl::Time t_drain = absl::Now();
  REFIT_RETURN_IF_ERROR(Drain(deadline));
  REFIT_RETURN_IF_ERROR(ops_->Finish(deadline));
  REFIT_RETURN_IF_ERROR(SyncConversions(-1));
  stats.peak_staging_bytes = budget_held_ + exchange_beside_;
  delta_stats_.convert_workspace_bytes = ConversionWorkspace();
  delta_stats_.header_bytes = header_bytes_;
  delta_stats_.drain_seconds += absl::ToDoubleSeconds(absl::Now() - t_drain);
  NoteTimes(ops_->TakeTimes());
  if (side_ == Side::kTrainer) sent_ = true;
  if (options_.digest) REFIT_RETURN_IF_ERROR(DigestRound(deadline, &stats.digests));
  stats.delta_messages = delta_stats_.messages - delta_stats_.dense_messages;
  stats.dense_messages = delta_stats_.dense_messages;
  stats.digest_seconds = delta_stats_.digest_seconds;
  stats.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return stats;
}

double DeltaRoundStats::count_gpu_seconds() const {
  double sum = 0;
  for (const auto& [b, e] : count_windows) sum += e - b;
  return sum;
}

double DeltaRoundStats::count_span_gpu_seconds() const {
  if (count_windows.empty()) return 0;
  double first = count_windows[0].first, last = count_windows[0].second;
  for (const auto& [b, e] : count_windows) {
    first = std::min(first, b);
    last = std::max(last, e);
  }
  return last - first;
}

void DeltaRunner::NoteTimes(const WaveOpsTimes& times) {
  delta_stats_.encode_gpu_seconds = times.encode_seconds;
  const double origin = absl::ToDoubleSeconds(times.origin - round_start_);
  for (const auto& [b, e] : times.count_windows) {
    delta_stats_.count_windows.push_back({origin + b, origin + e});
  }
}

void DeltaRunner::DigestItems(MsgWork& m, const char* stream) const {
  m.digest.clear();
  for (size_t k = 0; k < m.runs.size(); ++k) {
    const StreamDigestRun& r = m.runs[k];
    m.digest.push_back({stream + r.offset, r.bytes, r.element_bytes, r.first_key,
                        m.run_slots[k]});
  }
}

absl::Status DeltaRunner::DigestBatch(BatchWork& w, absl::Time deadline) {
  const absl::Time t0 = absl::Now();
  // Packed messages: what the member holds now, into staging (the
  // trainer's bytes are as the round sent them).
  REFIT_RETURN_IF_ERROR(StageCurrent(w, deadline));
  std::vector<DigestItem> items;
  for (MsgWork& m : w.msgs) {
    DigestItems(m, m.direct != nullptr ? m.direct : w.staging + m.stage_offset);
    items.insert(items.end(), m.digest.begin(), m.digest.end());
  }
  REFIT_RETURN_IF_ERROR(ops_->AddDigest(w.lane, items, deadline));
  delta_stats_.digest_seconds += absl::ToDoubleSeconds(absl::Now() - t0);
  return absl::OkStatus();
}

absl::Status DeltaRunner::DigestRound(absl::Time deadline, DigestSums* sums_out) {
  const absl::Time t0 = absl::Now();
  REFIT_ASSIGN_OR_RETURN(std::vector<uint64_t> sums, ops_->TakeDigests(deadline));
  for (size_t s = 0; s < digest_keys_.size() && s < sums.size(); ++s) {
    (*sums_out)[digest_keys_[s]] += sums[s];
  }
  delta_stats_.digest_seconds += absl::ToDoubleSeconds(absl::Now() - t0);
  return absl::OkStatus();
}

void DeltaRunner::Begin(const RoundStart& round) {
  version_ = round.version;
  options_.digest = round.digest;
  modes_.clear();
  for (int64_t base : round.delta_base) {
    modes_.push_back(base < 0 ? EngineDeltaMode{} : EngineDeltaMode{false, base});
  }
}

void DeltaRunner::Finish(RoundOutcome outcome) {
  if (outcome == RoundOutcome::kAborted) {
    sent_ = false;  // the snapshot keeps the previous version
    return;
  }
  Commit(version_);
}

void DeltaRunner::Commit(int64_t version) {
  if (side_ != Side::kTrainer || !sent_) {
    snapshot_->version = version;
    return;
  }
  sent_ = false;
  // The snapshot takes the trainer's current bytes of every message sent
  // (what the engines now hold), once per source region; packed ones
  // through the lane's staging, as the round packed them.
  std::set<std::string> done;
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  absl::Status s;
  for (BatchWork& w : work_) {
    std::vector<const MsgWork*> todo;
    bool packed = false;
    for (const MsgWork& m : w.msgs) {
      if (m.payload == nullptr || !done.insert(m.source_key).second) continue;
      todo.push_back(&m);
      packed = packed || m.direct == nullptr;
    }
    // Converted messages are quantized again as the round did (StageCurrent).
    if (packed) {
      s = ClaimLane(w.lane, deadline);
      if (s.ok()) s = StageCurrent(w, deadline);
      if (s.ok()) s = ops_->AfterLane(w.lane);
    }
    for (const MsgWork* m : todo) {
      if (!s.ok()) break;
      DeltaSnapshot::Region& region = snapshot_->messages[m->source_key];
      if (region.data == nullptr || region.bytes != m->bytes) {
        absl::StatusOr<char*> p = ops_->AllocateSnapshot(m->bytes);
        if (!p.ok()) {
          s = p.status();
          break;
        }
        region.data = std::shared_ptr<char>(*p, ops_->SnapshotReleaser());
        region.bytes = m->bytes;
      }
      s = ops_->Copy(w.lane, region.data.get(),
                     m->direct != nullptr ? m->direct : w.staging + m->stage_offset, m->bytes);
    }
    if (!s.ok()) break;
  }
  if (s.ok()) s = ops_->Finish(deadline);
  if (s.ok()) s = SyncConversions(-1);
  if (!s.ok()) {
    // Should a copy ever fail, nothing of the snapshot can be trusted: the
    // next round goes dense.
    snapshot_->messages.clear();
  }
  snapshot_->version = version;
}

}  // namespace refit
