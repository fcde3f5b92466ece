// DeltaRunner: delta and verified rounds on host memory, wave by wave:
// headers, then payloads, then apply in place.
#include "exec/delta/delta_runner.h"

#include <cstring>
#include <numeric>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/copier.h"
#include "exec/delta/delta_codec.h"
#include "exec/plan_side.h"
#include "layout/dtype.h"

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

// The reverse of an unpack program: the engine's buffers -> the stream.
std::vector<CopyTask> Reversed(const std::vector<CopyTask>& tasks) {
  std::vector<CopyTask> out = tasks;
  for (CopyTask& t : out) {
    std::swap(t.src_buffer, t.dst_buffer);
    std::swap(t.src_offset, t.dst_offset);
    std::swap(t.src_row_stride, t.dst_row_stride);
  }
  return out;
}

absl::Span<const uint8_t> Bytes(const char* p, int64_t n) {
  return {reinterpret_cast<const uint8_t*>(p), static_cast<size_t>(n)};
}

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
    if (m.src_rank == trainer_rank && seen.insert(SourceKey(plan, m)).second) total += m.bytes;
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
  if (transport->memory_kind() != MemoryKind::kHost ||
      transport->rank() != GlobalRank(plan, side, rank)) {
    return absl::FailedPreconditionError(absl::StrCat(
        side_name, " rank ", rank, ": the delta runner needs a host transport of global rank ",
        GlobalRank(plan, side, rank)));
  }
  if (src && options.max_snapshot_bytes > 0 &&
      SnapshotBytes(plan, rank) > options.max_snapshot_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "trainer rank ", rank, " needs a delta snapshot of ", SnapshotBytes(plan, rank),
        " bytes, above the bound of ", options.max_snapshot_bytes, " (max_snapshot_bytes)"));
  }
  std::unique_ptr<DeltaRunner> r(new DeltaRunner());
  r->plan_ = &plan;
  r->side_ = side;
  r->rank_ = rank;
  r->transport_ = transport;
  r->options_ = options;
  if (options.snapshot != nullptr) r->snapshot_ = options.snapshot;
  if (r->snapshot_->plan_fingerprint != plan.fingerprint) {
    *r->snapshot_ = DeltaSnapshot();
    r->snapshot_->plan_fingerprint = plan.fingerprint;
  }
  buffers.resize(layout.buffers.size(), nullptr);
  r->buffers_ = std::move(buffers);
  if (src) {
    ConversionStage::Memory memory;
    memory.allocate = [](int64_t bytes) -> absl::StatusOr<char*> {
      return new char[std::max<int64_t>(bytes, 1)];
    };
    memory.release = [](char* p, int64_t) { delete[] p; };
    auto copier = std::shared_ptr<Copier>(MakeHostCopier());
    REFIT_ASSIGN_OR_RETURN(
        r->conversions_,
        ConversionStage::Create(plan, rank, [copier] { return copier->MakeConvertOps(); },
                                std::move(memory), &r->buffers_));
  }
  for (const Wave& wave : plan.waves) {
    WaveWork w;
    w.lane = std::max(0, wave.lane) % transport->num_lanes();
    for (int32_t mi = wave.first_message; mi < wave.first_message + wave.num_messages; ++mi) {
      if (mi < 0 || static_cast<size_t>(mi) >= plan.messages.size()) {
        return absl::InvalidArgumentError(absl::StrCat("message ", mi, " outside the plan"));
      }
      const Message& m = plan.messages[mi];
      if ((src ? m.src_rank : m.dst_rank) != rank) continue;
      MsgWork mw;
      mw.message = mi;
      mw.engine_rank = m.dst_rank;
      mw.peer = src ? GlobalRank(plan, Side::kEngine, m.dst_rank)
                    : GlobalRank(plan, Side::kTrainer, m.src_rank);
      mw.bytes = m.bytes;
      mw.word_bytes = MessageWordBytes(plan, m);
      if (src) mw.source_key = SourceKey(plan, m);
      const bool contiguous = src ? m.src_contiguous : m.dst_contiguous;
      const int32_t cbuf = src ? m.src_buffer : m.dst_buffer;
      if (contiguous && cbuf >= 0 && static_cast<size_t>(cbuf) < r->buffers_.size() &&
          r->buffers_[cbuf] != nullptr) {
        mw.direct = r->buffers_[cbuf] + (src ? m.src_offset : m.dst_offset);
      } else {
        REFIT_ASSIGN_OR_RETURN(mw.tasks, src ? PackProgram(plan, m) : UnpackProgram(plan, m));
        for (const CopyTask& t : mw.tasks) {
          const int32_t b = src ? t.src_buffer : t.dst_buffer;
          if (b < 0 || static_cast<size_t>(b) >= r->buffers_.size() ||
              r->buffers_[b] == nullptr) {
            return absl::InvalidArgumentError(absl::StrCat(
                side_name, " rank ", rank, ": buffer #", b, " is not registered"));
          }
        }
      }
      w.msgs.push_back(std::move(mw));
    }
    if (!w.msgs.empty()) r->work_.push_back(std::move(w));
  }
  return r;
}

void DeltaRunner::Cancel(const absl::Status& reason) {
  {
    absl::MutexLock l(&mu_);
    if (cancelled_.ok()) cancelled_ = reason;
  }
  transport_->Cancel(reason);
}

absl::Status DeltaRunner::Exchange(int32_t lane, std::vector<SendOp> sends,
                                   std::vector<RecvOp> recvs, absl::Time deadline) {
  {
    absl::MutexLock l(&mu_);
    if (!cancelled_.ok()) return cancelled_;
  }
  if (sends.empty() && recvs.empty()) return absl::OkStatus();
  REFIT_RETURN_IF_ERROR(transport_->StartWave(lane, sends, recvs, deadline));
  return transport_->WaitWave(lane, deadline);
}

absl::Status DeltaRunner::Convert(absl::Time deadline) {
  // The cut tiles' partial amaxes among the trainer ranks sharing them,
  // one exchange on lane 0 before any wave (as the executor does).
  auto exchange = [this, deadline](const std::map<int32_t, std::vector<float>>& sends)
      -> absl::StatusOr<std::map<int32_t, std::vector<float>>> {
    std::map<int32_t, std::vector<float>> received;
    std::vector<SendOp> so;
    std::vector<RecvOp> ro;
    for (const auto& [peer, count] : conversions_->peers()) {
      const std::vector<float>& v = sends.at(peer);
      so.push_back({peer, v.data(), static_cast<int64_t>(v.size() * 4)});
      std::vector<float>& in = received[peer];
      in.resize(count);
      ro.push_back({peer, in.data(), count * 4});
    }
    absl::Status s = Exchange(0, std::move(so), std::move(ro), deadline);
    if (!s.ok()) {
      return AnnotateStatus(s, absl::StrCat("trainer rank ", rank_, ": exchanging FP8 tile amaxes"));
    }
    return received;
  };
  return conversions_->Run(buffers_, exchange);
}

absl::StatusOr<RunStats> DeltaRunner::Run(absl::Time deadline) {
  const absl::Time start = absl::Now();
  RunStats stats;
  if (conversions_ != nullptr) REFIT_RETURN_IF_ERROR(Convert(deadline));
  digests_.clear();
  delta_stats_ = DeltaRoundStats();
  pending_.clear();
  for (const WaveWork& w : work_) {
    REFIT_RETURN_IF_ERROR(side_ == Side::kTrainer ? SendWave(w, deadline, &stats)
                                                  : ReceiveWave(w, deadline, &stats));
    ++stats.waves;
  }
  if (side_ == Side::kEngine && options_.verify) {
    const absl::Time t0 = absl::Now();
    for (const WaveWork& w : work_) {
      for (const MsgWork& m : w.msgs) {
        REFIT_RETURN_IF_ERROR(
            DigestMessageTarget(*plan_, plan_->messages[m.message], buffers_, &digests_));
      }
    }
    delta_stats_.digest_seconds += absl::ToDoubleSeconds(absl::Now() - t0);
  }
  stats.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return stats;
}

absl::Status DeltaRunner::SendWave(const WaveWork& w, absl::Time deadline, RunStats* stats) {
  std::vector<SendOp> headers, payloads;
  std::vector<char> current;
  for (const MsgWork& m : w.msgs) {
    const Message& msg = plan_->messages[m.message];
    const char* cur = m.direct;
    if (cur == nullptr) {
      current.resize(m.bytes);
      REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> copies,
                             ResolveTasks(m.tasks, buffers_, {}, nullptr, current.data()));
      RunCopiesHost(copies);
      cur = current.data();
    }
    const int64_t words = m.bytes / m.word_bytes;
    const EngineDeltaMode mode = static_cast<size_t>(m.engine_rank) < modes_.size()
                                     ? modes_[m.engine_rank]
                                     : EngineDeltaMode{};
    auto snap = snapshot_->messages.find(m.source_key);
    const bool delta = options_.delta && !mode.dense && mode.base_version >= 0 &&
                       mode.base_version == snapshot_->version && snap != snapshot_->messages.end() &&
                       static_cast<int64_t>(snap->second.size()) == m.bytes;
    DeltaEncoding enc = DeltaEncoding::kDense;
    int64_t changed = words;
    absl::Span<const uint8_t> base = Bytes(cur, m.bytes);
    if (delta) {
      base = absl::MakeConstSpan(snap->second);
      changed = CountChangedWords(Bytes(cur, m.bytes), base, m.word_bytes);
      enc = ChooseEncoding(m.word_bytes, words, changed);
    }
    const int64_t payload = DeltaPayloadBytes(enc, m.word_bytes, words, changed);
    std::vector<uint8_t>& out = pending_[m.message];
    out.assign(sizeof(DeltaHeader) + payload, 0);
    absl::StatusOr<int64_t> n =
        EncodeDelta(Bytes(cur, m.bytes), base, m.word_bytes, enc, changed, absl::MakeSpan(out));
    if (!n.ok()) {
      return AnnotateStatus(n.status(), absl::StrCat("trainer rank ", rank_, " to engine rank ",
                                                     m.engine_rank, ": encoding"));
    }
    if (options_.verify) {
      const absl::Time t0 = absl::Now();
      REFIT_RETURN_IF_ERROR(DigestMessageStream(*plan_, msg, cur, &digests_));
      delta_stats_.digest_seconds += absl::ToDoubleSeconds(absl::Now() - t0);
    }
    headers.push_back(SendOp{m.peer, out.data(), sizeof(DeltaHeader)});
    if (payload > 0) payloads.push_back(SendOp{m.peer, out.data() + sizeof(DeltaHeader), payload});
    ++delta_stats_.messages;
    if (enc == DeltaEncoding::kDense) ++delta_stats_.dense_messages;
    delta_stats_.dense_bytes += m.bytes;
    delta_stats_.wire_bytes += *n;
    delta_stats_.changed_words += changed;
    stats->bytes_sent += *n;
  }
  REFIT_RETURN_IF_ERROR(Exchange(w.lane, std::move(headers), {}, deadline));
  return Exchange(w.lane, std::move(payloads), {}, deadline);
}

absl::Status DeltaRunner::ReceiveWave(const WaveWork& w, absl::Time deadline, RunStats* stats) {
  std::vector<std::vector<uint8_t>> enc(w.msgs.size());
  std::vector<RecvOp> headers, payloads;
  for (size_t i = 0; i < w.msgs.size(); ++i) {
    enc[i].assign(sizeof(DeltaHeader), 0);
    headers.push_back(RecvOp{w.msgs[i].peer, enc[i].data(), sizeof(DeltaHeader)});
  }
  REFIT_RETURN_IF_ERROR(Exchange(w.lane, {}, std::move(headers), deadline));
  auto context = [&](const MsgWork& m) {
    const Message& msg = plan_->messages[m.message];
    const Segment& seg = plan_->segments[msg.first_segment];
    return absl::StrCat("engine rank ", rank_, ", tensor ",
                        plan_->dst.tensors[plan_->dst.records[seg.dst_record].tensor].name,
                        " from trainer rank ", msg.src_rank);
  };
  for (size_t i = 0; i < w.msgs.size(); ++i) {
    const MsgWork& m = w.msgs[i];
    absl::StatusOr<DeltaHeader> h = ReadDeltaHeader(enc[i]);
    if (!h.ok()) return AnnotateStatus(h.status(), context(m));
    if (h->word_bytes == 0 || static_cast<int64_t>(h->num_words * h->word_bytes) != m.bytes) {
      return absl::DataLossError(absl::StrCat(context(m), ": the header describes ",
                                              h->num_words, " words of ", h->word_bytes,
                                              " bytes, the message has ", m.bytes));
    }
    enc[i].resize(sizeof(DeltaHeader) + h->payload_bytes);
    if (h->payload_bytes > 0) {
      payloads.push_back(RecvOp{m.peer, enc[i].data() + sizeof(DeltaHeader),
                                static_cast<int64_t>(h->payload_bytes)});
    }
    ++delta_stats_.messages;
    if (h->encoding == static_cast<uint8_t>(DeltaEncoding::kDense)) ++delta_stats_.dense_messages;
    delta_stats_.dense_bytes += m.bytes;
    delta_stats_.wire_bytes += enc[i].size();
    delta_stats_.changed_words += h->num_changed;
    stats->bytes_received += enc[i].size();
  }
  REFIT_RETURN_IF_ERROR(Exchange(w.lane, {}, std::move(payloads), deadline));
  std::vector<char> staging;
  for (size_t i = 0; i < w.msgs.size(); ++i) {
    const MsgWork& m = w.msgs[i];
    if (m.direct != nullptr) {
      absl::Status s = ApplyDelta(enc[i], {reinterpret_cast<uint8_t*>(m.direct),
                                           static_cast<size_t>(m.bytes)});
      if (!s.ok()) return AnnotateStatus(s, context(m));
      continue;
    }
    // Gather the engine's own bytes of the message, apply, unpack.
    staging.resize(m.bytes);
    REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> gather,
                           ResolveTasks(Reversed(m.tasks), buffers_, {}, nullptr, staging.data()));
    RunCopiesHost(gather);
    absl::Status s = ApplyDelta(enc[i], {reinterpret_cast<uint8_t*>(staging.data()),
                                         static_cast<size_t>(m.bytes)});
    if (!s.ok()) return AnnotateStatus(s, context(m));
    REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> unpack,
                           ResolveTasks(m.tasks, {}, buffers_, staging.data(), nullptr));
    RunCopiesHost(unpack);
  }
  return absl::OkStatus();
}

void DeltaRunner::Commit(int64_t version) {
  // Messages of one source region carry the same current bytes: the
  // first one's encoding brings the shared snapshot up to date.
  std::set<std::string> done;
  for (const WaveWork& w : work_) {
    for (const MsgWork& m : w.msgs) {
      auto enc = pending_.find(m.message);
      if (enc == pending_.end() || !done.insert(m.source_key).second) continue;
      std::vector<uint8_t>& snap = snapshot_->messages[m.source_key];
      snap.resize(m.bytes);
      // Our own encoding; should it ever fail, the region has no snapshot
      // and goes dense next round.
      if (!ApplyDelta(enc->second, absl::MakeSpan(snap)).ok()) {
        snapshot_->messages.erase(m.source_key);
      }
    }
  }
  pending_.clear();
  snapshot_->version = version;
}

void DeltaRunner::Abort() { pending_.clear(); }

}  // namespace refit
