// Executor: one rank's waves of a plan, pipelined over the transport's lanes.
#include "exec/executor.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "exec/convert/amax_exchange.h"
#include "exec/program/message_place.h"
#include "layout/dtype.h"

namespace refit {

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(
    const Plan& plan, Side side, int32_t rank, std::vector<char*> buffers,
    Transport* transport, ExecutorOptions options) {
  const SideLayout& layout = side == Side::kTrainer ? plan.src : plan.dst;
  const std::string side_name(SideName(side));
  if (transport == nullptr) {
    return absl::InvalidArgumentError("executor needs a transport");
  }
  if (rank < 0 || rank >= layout.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        side_name, " rank ", rank, " outside world size ", layout.world_size));
  }
  std::unique_ptr<Executor> e(new Executor());
  e->plan_ = &plan;
  e->side_ = side;
  e->rank_ = rank;
  e->global_rank_ = GlobalRank(plan, side, rank);
  e->transport_ = transport;
  e->options_ = options;
  if (transport->rank() != e->global_rank_ ||
      transport->world_size() != plan.src.world_size + plan.dst.world_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        side_name, " rank ", rank, ": transport is rank ", transport->rank(),
        " of ", transport->world_size(), ", expected rank ", e->global_rank_,
        " of ", plan.src.world_size + plan.dst.world_size));
  }
  if (options.copier != nullptr) {
    e->copier_ = options.copier;
  } else {
    e->owned_copier_ = MakeHostCopier();
    e->copier_ = e->owned_copier_.get();
  }
  if (e->copier_->kind() != transport->memory_kind()) {
    return absl::FailedPreconditionError(absl::StrCat(
        side_name, " rank ", rank,
        ": copier and transport use different memory kinds"));
  }
  e->num_lanes_ = options.num_lanes > 0 ? options.num_lanes
                                        : transport->num_lanes();
  if (e->num_lanes_ > transport->num_lanes()) {
    return absl::FailedPreconditionError(absl::StrCat(
        side_name, " rank ", rank, ": ", e->num_lanes_,
        " lanes requested, transport has ", transport->num_lanes()));
  }
  buffers.resize(layout.buffers.size(), nullptr);
  e->buffers_ = std::move(buffers);
  if (side == Side::kTrainer) {
    e->scratch_memory_.allocate = [ex = e.get()](int64_t bytes) { return ex->Hold(bytes); };
    e->scratch_memory_.release = [ex = e.get()](char* p, int64_t bytes) { ex->Release(p, bytes); };
    REFIT_ASSIGN_OR_RETURN(
        e->conversions_,
        ConversionStage::Create(plan, rank, [ex = e.get()] { return ex->copier_->MakeConvertOps(0); },
                                e->scratch_memory_, &e->buffers_));
    if (e->conversions_ != nullptr && options.exclude_peer) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trainer rank ", rank, " converts weights (FP8) and shares its peers "
          "with another data plane: conversions need every peer on one data plane"));
    }
  }

  // Compile the rank's waves.
  const bool src = side == Side::kTrainer;
  e->staging_.assign(e->num_lanes_, 0);
  for (size_t ri = 0; ri < plan.waves.size(); ++ri) {
    const Wave& wave = plan.waves[ri];
    WaveWork w;
    w.wave = static_cast<int32_t>(ri);
    w.lane = std::max(0, wave.lane) % e->num_lanes_;
    int64_t staging = 0;
    for (int32_t mi = wave.first_message;
         mi < wave.first_message + wave.num_messages; ++mi) {
      if (mi < 0 || static_cast<size_t>(mi) >= plan.messages.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("wave ", ri, " refers to message ", mi,
                         " outside the plan"));
      }
      const Message& m = plan.messages[mi];
      // This rank sends the message (a trainer rank, or an engine rank
      // forwarding a relay from its own buffers), or receives it.
      const bool sends = m.relay ? !src && m.src_rank == rank : src && m.src_rank == rank;
      const bool receives = !src && m.dst_rank == rank;
      if (!sends && !receives) continue;
      if (sends && m.relay) w.relays = true;
      MsgWork mw;
      mw.message = mi;
      mw.peer = sends ? GlobalRank(plan, Side::kEngine, m.dst_rank)
                      : GlobalRank(plan, m.relay ? Side::kEngine : Side::kTrainer, m.src_rank);
      if (options.exclude_peer && options.exclude_peer(mw.peer)) continue;
      mw.bytes = m.bytes;
      REFIT_ASSIGN_OR_RETURN(MessagePlace place,
                             PlaceMessage(plan, m, sends, layout, e->buffers_,
                                          absl::StrCat(side_name, " rank ", rank)));
      if (place.direct != nullptr) {
        mw.direct = true;
        mw.direct_ptr = place.direct;
      } else {
        mw.tasks = std::move(place.tasks);
        mw.staging_offset = staging;
        staging += (m.bytes + 255) / 256 * 256;
      }
      (sends ? w.sends : w.recvs).push_back(std::move(mw));
    }
    if (w.sends.empty() && w.recvs.empty()) continue;
    e->staging_[w.lane] = std::max(e->staging_[w.lane], staging);
    e->work_.push_back(std::move(w));
  }
  int64_t total = 0;
  for (int64_t s : e->staging_) total += s;
  if (total > plan.options.staging_budget_bytes) {
    // The plan budgets unaligned bytes: pack messages back to back instead
    // (tiny budgets; never needed at 256 bytes or more per lane per message).
    e->staging_.assign(e->num_lanes_, 0);
    for (WaveWork& w : e->work_) {
      int64_t staging = 0;
      for (auto* list : {&w.sends, &w.recvs}) {
        for (MsgWork& m : *list) {
          if (m.direct) continue;
          m.staging_offset = staging;
          staging += m.bytes;
        }
      }
      e->staging_[w.lane] = std::max(e->staging_[w.lane], staging);
    }
    total = 0;
    for (int64_t s : e->staging_) total += s;
  }
  if (total > plan.options.staging_budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        side_name, " rank ", rank, " needs ", total,
        " bytes of staging, above the plan's budget of ",
        plan.options.staging_budget_bytes));
  }
  e->staging_ptr_.assign(e->num_lanes_, nullptr);
  for (int32_t l = 0; l < e->num_lanes_; ++l) {
    if (e->staging_[l] == 0) continue;
    REFIT_ASSIGN_OR_RETURN(e->staging_ptr_[l], e->Hold(e->staging_[l]));
  }
  return e;
}

Executor::~Executor() {
  for (char* p : staging_ptr_) {
    if (p != nullptr) copier_->Free(p);
  }
  conversions_.reset();  // releases its scratch through Release
}

absl::Status Executor::Convert(absl::Time deadline) {
  return conversions_->Run(buffers_, AmaxExchangeOver(conversions_.get(), transport_, copier_,
                                                      &scratch_memory_, rank_, deadline));
}

absl::Status Executor::Pack(const WaveWork& w) {
  std::vector<ResolvedCopy> copies;
  for (const MsgWork& m : w.sends) {
    if (m.direct) continue;
    REFIT_ASSIGN_OR_RETURN(
        std::vector<ResolvedCopy> c,
        ResolveTasks(m.tasks, buffers_, {}, nullptr,
                     staging_ptr_[w.lane] + m.staging_offset));
    copies.insert(copies.end(), c.begin(), c.end());
  }
  if (!copies.empty()) REFIT_RETURN_IF_ERROR(copier_->Copy(w.lane, copies));
  return absl::OkStatus();
}

absl::Status Executor::Unpack(const WaveWork& w, absl::Time deadline) {
  std::vector<ResolvedCopy> copies;
  for (const MsgWork& m : w.recvs) {
    if (m.direct) continue;
    REFIT_ASSIGN_OR_RETURN(
        std::vector<ResolvedCopy> c,
        ResolveTasks(m.tasks, {}, buffers_,
                     staging_ptr_[w.lane] + m.staging_offset, nullptr));
    copies.insert(copies.end(), c.begin(), c.end());
  }
  if (!copies.empty()) {
    REFIT_RETURN_IF_ERROR(copier_->Copy(w.lane, copies));
    // The lane's staging is reused by its next wave (stream order does
    // that for ordered copiers).
    if (!copier_->OrderedWithTransport()) {
      REFIT_RETURN_IF_ERROR(copier_->Sync(w.lane, deadline));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Executor::HashSegment(int32_t segment,
                                               const char* packed,
                                               bool packed_is_stream,
                                               std::vector<char>* scratch) {
  const Segment& seg = plan_->segments[segment];
  scratch->resize(seg.bytes);
  if (packed_is_stream) {
    REFIT_RETURN_IF_ERROR(copier_->ToHost(scratch->data(), packed, seg.bytes));
    return Fnv1a64Words(absl::string_view(scratch->data(), static_cast<size_t>(seg.bytes)));
  }
  // Gather the segment back out of the destination buffer.
  const Record& r = plan_->dst.records[seg.dst_record];
  const int64_t es = DTypeSize(plan_->dst.tensors[r.tensor].dtype);
  std::vector<CopyTask> tasks;
  REFIT_RETURN_IF_ERROR(AppendRecordTasks(r, es, seg.box, 0, true, &tasks));
  std::vector<ResolvedCopy> copies;
  REFIT_ASSIGN_OR_RETURN(copies, ResolveTasks(tasks, buffers_, {}, nullptr,
                                              scratch->data()));
  if (copier_->kind() != MemoryKind::kHost) {
    return absl::UnimplementedError("verify reads device buffers via host");
  }
  RunCopiesHost(copies);
  return Fnv1a64Words(absl::string_view(scratch->data(), static_cast<size_t>(seg.bytes)));
}

absl::StatusOr<char*> Executor::Hold(int64_t bytes) {
  REFIT_ASSIGN_OR_RETURN(char* p, copier_->Allocate(bytes));
  held_bytes_ += bytes;
  peak_held_bytes_ = std::max(peak_held_bytes_, held_bytes_);
  return p;
}

void Executor::Release(char* p, int64_t bytes) {
  copier_->Free(p);
  held_bytes_ -= bytes;
}

absl::StatusOr<RunStats> Executor::Run(absl::Time deadline) {
  const absl::Time start = absl::Now();
  peak_held_bytes_ = held_bytes_;
  if (conversions_ != nullptr) REFIT_RETURN_IF_ERROR(Convert(deadline));
  REFIT_ASSIGN_OR_RETURN(RunStats stats, RunWaves(deadline));
  stats.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  stats.peak_staging_bytes =
      peak_held_bytes_ + (conversions_ != nullptr ? conversions_->workspace_bytes() : 0);
  return stats;
}

absl::StatusOr<RunStats> Executor::RunWaves(absl::Time deadline) {
  const absl::Time start = absl::Now();
  RunStats stats;
  std::vector<int> in_flight(num_lanes_, -1);  // index into work_
  hashes_.clear();
  std::vector<char> scratch;
  // Ordered copiers (device copies on the lane's stream): unpack is
  // enqueued right behind the wave, and the host waits only before it
  // reuses a lane (WaitWave) — no host round trip between pack and send or
  // between receive and unpack.
  const bool ordered = copier_->OrderedWithTransport();
  auto finish = [&](int lane) -> absl::Status {
    const int wi = in_flight[lane];
    if (wi < 0) return absl::OkStatus();
    in_flight[lane] = -1;
    REFIT_RETURN_IF_ERROR(transport_->WaitWave(lane, deadline));
    const WaveWork& w = work_[wi];
    if (!ordered) REFIT_RETURN_IF_ERROR(Unpack(w, deadline));
    if (options_.segment_checksums) {
      if (ordered) REFIT_RETURN_IF_ERROR(copier_->Sync(lane, deadline));
      for (const MsgWork& m : w.recvs) {
        const Message& msg = plan_->messages[m.message];
        std::vector<uint64_t>& h = hashes_[m.message];
        for (int32_t s = 0; s < msg.num_segments; ++s) {
          REFIT_ASSIGN_OR_RETURN(
              uint64_t x,
              HashSegment(msg.first_segment + s, nullptr, false, &scratch));
          h.push_back(x);
        }
      }
    }
    return absl::OkStatus();
  };
  // Queued: an ordered copier on a transport that queues waves per lane
  // (NCCL on CUDA streams) gets every wave enqueued at once — pack, wave,
  // unpack, in plan order, each lane's stream ordering them (the next
  // wave's pack on a lane reuses its staging only after the previous
  // wave's unpack). The host then only waits for the lanes to drain,
  // polling for errors against the deadline. Verify keeps the per-wave
  // path (it hashes on the host).
  bool relays = false;
  for (const WaveWork& w : work_) relays = relays || w.relays;
  const bool queued = ordered && !options_.segment_checksums && !relays &&
                      transport_->max_waves_per_lane() >=
                          static_cast<int32_t>(work_.size());
  if (queued) {
    std::vector<int> posted(num_lanes_, 0);
    for (const WaveWork& w : work_) {
      REFIT_RETURN_IF_ERROR(Pack(w));
      std::vector<SendOp> sends;
      std::vector<RecvOp> recvs;
      for (const MsgWork& m : w.sends) {
        sends.push_back(SendOp{m.peer, MessagePtr(w, m), m.bytes});
        stats.bytes_sent += m.bytes;
      }
      for (const MsgWork& m : w.recvs) {
        recvs.push_back(RecvOp{m.peer, MessagePtr(w, m), m.bytes});
        stats.bytes_received += m.bytes;
      }
      REFIT_RETURN_IF_ERROR(transport_->StartWave(w.lane, sends, recvs, deadline));
      REFIT_RETURN_IF_ERROR(Unpack(w, deadline));
      ++posted[w.lane];
      ++stats.waves;
    }
    for (int l = 0; l < num_lanes_; ++l) {
      for (; posted[l] > 0; --posted[l]) {
        REFIT_RETURN_IF_ERROR(transport_->WaitWave(l, deadline));
      }
      REFIT_RETURN_IF_ERROR(copier_->Sync(l, deadline));
    }
    stats.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    return stats;
  }
  for (size_t wi = 0; wi < work_.size(); ++wi) {
    const WaveWork& w = work_[wi];
    REFIT_RETURN_IF_ERROR(finish(w.lane));
    if (w.relays) {
      // It forwards bytes earlier waves wrote, on any lane: those waves
      // (and their unpacks) complete first.
      for (int l = 0; l < num_lanes_; ++l) {
        REFIT_RETURN_IF_ERROR(finish(l));
        if (ordered) REFIT_RETURN_IF_ERROR(copier_->Sync(l, deadline));
      }
    }
    REFIT_RETURN_IF_ERROR(Pack(w));
    // Verify hashes the packed bytes on the host: they must be complete.
    if (!ordered || options_.segment_checksums) {
      REFIT_RETURN_IF_ERROR(copier_->Sync(w.lane, deadline));
    }
    std::vector<SendOp> sends;
    std::vector<RecvOp> recvs;
    for (const MsgWork& m : w.sends) {
      const char* p = MessagePtr(w, m);
      sends.push_back(SendOp{m.peer, p, m.bytes});
      stats.bytes_sent += m.bytes;
      if (options_.segment_checksums) {
        const Message& msg = plan_->messages[m.message];
        std::vector<uint64_t>& h = hashes_[m.message];
        int64_t off = 0;
        for (int32_t s = 0; s < msg.num_segments; ++s) {
          REFIT_ASSIGN_OR_RETURN(
              uint64_t x,
              HashSegment(msg.first_segment + s, p + off, true, &scratch));
          h.push_back(x);
          off += plan_->segments[msg.first_segment + s].bytes;
        }
      }
    }
    for (const MsgWork& m : w.recvs) {
      char* p = MessagePtr(w, m);
      recvs.push_back(RecvOp{m.peer, p, m.bytes});
      stats.bytes_received += m.bytes;
    }
    REFIT_RETURN_IF_ERROR(transport_->StartWave(w.lane, sends, recvs, deadline));
    if (ordered) REFIT_RETURN_IF_ERROR(Unpack(w, deadline));
    in_flight[w.lane] = static_cast<int>(wi);
    ++stats.waves;
  }
  // Drain in posting order.
  std::vector<std::pair<int, int>> order;
  for (int l = 0; l < num_lanes_; ++l) {
    if (in_flight[l] >= 0) order.emplace_back(in_flight[l], l);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [wi, lane] : order) REFIT_RETURN_IF_ERROR(finish(lane));
  if (ordered) {
    for (int l = 0; l < num_lanes_; ++l) {
      REFIT_RETURN_IF_ERROR(copier_->Sync(l, deadline));
    }
  }
  if (options_.segment_checksums) REFIT_RETURN_IF_ERROR(CompareSegmentChecksums(deadline));
  stats.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return stats;
}

absl::Status Executor::CompareSegmentChecksums(absl::Time deadline) {
  // One group on lane 0: per peer, the hashes of all messages between us in
  // plan order, from their sender to their receiver (an engine rank sends
  // those of the relays it forwarded and receives those of its messages).
  const bool src = side_ == Side::kTrainer;
  std::map<int32_t, std::vector<int32_t>> sent_to, received_from;  // peer -> messages
  for (const auto& [mi, h] : hashes_) {
    const Message& m = plan_->messages[mi];
    const bool sender = src || (m.relay && m.src_rank == rank_);
    if (sender) {
      sent_to[GlobalRank(*plan_, Side::kEngine, m.dst_rank)].push_back(mi);
    } else {
      received_from[GlobalRank(*plan_, m.relay ? Side::kEngine : Side::kTrainer, m.src_rank)]
          .push_back(mi);
    }
  }
  std::map<int32_t, std::vector<uint64_t>> mine_sent, mine_received, theirs;
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  auto concat = [this](const std::vector<int32_t>& msgs, std::vector<uint64_t>* v) {
    for (int32_t mi : msgs) v->insert(v->end(), hashes_[mi].begin(), hashes_[mi].end());
  };
  for (const auto& [peer, msgs] : sent_to) {
    std::vector<uint64_t>& v = mine_sent[peer];
    concat(msgs, &v);
    sends.push_back(SendOp{peer, v.data(), static_cast<int64_t>(v.size() * 8)});
  }
  for (const auto& [peer, msgs] : received_from) {
    std::vector<uint64_t>& v = mine_received[peer];
    concat(msgs, &v);
    std::vector<uint64_t>& t = theirs[peer];
    t.resize(v.size());
    recvs.push_back(RecvOp{peer, t.data(), static_cast<int64_t>(t.size() * 8)});
  }
  if (copier_->kind() != MemoryKind::kHost) {
    return absl::UnimplementedError(
        "verify mode exchanges host hashes; not supported on device lanes");
  }
  REFIT_RETURN_IF_ERROR(transport_->StartWave(0, sends, recvs, deadline));
  REFIT_RETURN_IF_ERROR(transport_->WaitWave(0, deadline));
  for (const auto& [peer, msgs] : received_from) {
    const std::vector<uint64_t>& a = theirs[peer];
    const std::vector<uint64_t>& b = mine_received[peer];
    size_t k = 0;
    for (int32_t mi : msgs) {
      const Message& m = plan_->messages[mi];
      for (int32_t s = 0; s < m.num_segments; ++s, ++k) {
        if (a[k] == b[k]) continue;
        const Segment& seg = plan_->segments[m.first_segment + s];
        const Record& r = plan_->dst.records[seg.dst_record];
        return absl::DataLossError(absl::StrCat(
            "verify: tensor ", plan_->dst.tensors[r.tensor].name, " part ",
            seg.box.ToString(), " in buffer ", plan_->dst.buffers[r.buffer].name, ": ",
            m.relay ? "engine rank " : "trainer rank ", m.src_rank,
            m.relay ? " (relay) sent checksum " : " sent checksum ", a[k],
            " but engine rank ", m.dst_rank, " wrote checksum ", b[k]));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace refit
