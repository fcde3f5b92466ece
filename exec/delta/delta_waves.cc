// DeltaRunner's batches (see delta_runner.h): a trainer counts and encodes
// every message of a batch at once and sends the headers, then the
// payloads; an engine receives the headers, sizes the payloads' receives
// from them and applies every message of the batch at once.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/delta/delta_codec.h"
#include "exec/delta/delta_runner.h"

namespace refit {
namespace {

constexpr int64_t kHeader = sizeof(DeltaHeader);

int64_t Align16(int64_t x) { return (x + 15) / 16 * 16; }

// A batch's payload transfers. Encoded payloads lie one after another in
// the batch's encoding buffer, each from a 16-byte boundary: one that
// starts where the last transfer's ends (rounded up to 16), to the same
// peer, joins it, padding included, so a batch's deltas to a peer travel as
// one transfer rather than one per message (each is a step of the
// transport's kernel). Dense payloads go on their own. Sender and receiver
// lay out and join alike, so their operations match.
template <typename Op>
class PayloadOps {
 public:
  template <typename Ptr>
  void Add(int32_t peer, Ptr p, int64_t bytes, bool encoded) {
    if (bytes <= 0) return;
    const auto* c = reinterpret_cast<const char*>(p);
    if (encoded && last_encoded_ && ops_.back().peer == peer &&
        c == static_cast<const char*>(ops_.back().ptr) + Align16(ops_.back().bytes)) {
      ops_.back().bytes = c - static_cast<const char*>(ops_.back().ptr) + bytes;
      return;
    }
    ops_.push_back({peer, p, bytes});
    last_encoded_ = encoded;
  }
  std::vector<Op> Take() { return std::move(ops_); }

 private:
  std::vector<Op> ops_;
  bool last_encoded_ = false;
};

}  // namespace

std::string DeltaRunner::Context(const MsgWork& m) const {
  const Message& msg = plan_->messages[m.message];
  const Segment& seg = plan_->segments[msg.first_segment];
  return absl::StrCat("engine rank ", msg.dst_rank, ", tensor ",
                      plan_->dst.tensors[plan_->dst.records[seg.dst_record].tensor].name,
                      msg.relay ? " from engine rank " : " from trainer rank ", msg.src_rank,
                      msg.relay ? " (relay)" : "");
}

absl::Status DeltaRunner::Post(int32_t lane, std::vector<SendOp> sends,
                               std::vector<RecvOp> recvs, absl::Time deadline) {
  {
    absl::MutexLock l(&mu_);
    if (!cancelled_.ok()) return cancelled_;
  }
  if (sends.empty() && recvs.empty()) return absl::OkStatus();
  // A transport that holds one group (wave) per lane: wait for it first.
  while (in_flight_[lane] >= transport_->max_waves_per_lane()) {
    REFIT_RETURN_IF_ERROR(transport_->WaitWave(lane, deadline));
    --in_flight_[lane];
    ++done_[lane];
  }
  REFIT_RETURN_IF_ERROR(transport_->StartWave(lane, sends, recvs, deadline));
  ++in_flight_[lane];
  ++posted_[lane];
  ++delta_stats_.groups;
  return absl::OkStatus();
}

absl::Status DeltaRunner::Drain(absl::Time deadline) {
  for (int32_t lane = 0; lane < static_cast<int32_t>(in_flight_.size()); ++lane) {
    REFIT_RETURN_IF_ERROR(DrainLane(lane, deadline));
  }
  return absl::OkStatus();
}

absl::Status DeltaRunner::BeginSend(BatchWork& w, absl::Time deadline) {
  const absl::Time t0 = absl::Now();
  // Pack what is not one buffer range into the lane's staging, once the
  // lane's previous batch is done with it.
  if (w.staging != nullptr) {
    REFIT_RETURN_IF_ERROR(ClaimFor(w, deadline));
    REFIT_RETURN_IF_ERROR(StageCurrent(w, deadline));
    REFIT_RETURN_IF_ERROR(ops_->AfterLane(w.lane));
  }
  std::vector<EncodeItem>& items = w.items;
  items.clear();
  for (MsgWork& m : w.msgs) {
    const EngineDeltaMode mode = static_cast<size_t>(m.engine_rank) < modes_.size()
                                     ? modes_[m.engine_rank]
                                     : EngineDeltaMode{};
    auto snap = snapshot_->messages.find(m.source_key);
    const bool delta = options_.delta && !mode.dense && mode.base_version >= 0 &&
                       mode.base_version == snapshot_->version &&
                       snap != snapshot_->messages.end() && snap->second.bytes == m.bytes;
    EncodeItem it;
    it.cur = m.direct != nullptr ? m.direct : w.staging + m.stage_offset;
    it.snap = delta ? snap->second.data.get() : nullptr;
    it.bytes = m.bytes;
    it.word_bytes = m.word_bytes;
    // Verified rounds: the count digests the current bytes as it reads them.
    m.digest.clear();
    if (options_.digest) DigestItems(m, it.cur);
    it.digest = m.digest;
    items.push_back(it);
  }
  REFIT_RETURN_IF_ERROR(ops_->StartCount(w.lane, items, deadline));
  delta_stats_.count_wait_seconds += absl::ToDoubleSeconds(absl::Now() - t0);
  TimesOf(w).start = Since();
  return absl::OkStatus();
}

absl::Status DeltaRunner::EndSend(BatchWork& w, absl::Time deadline, RunStats* stats) {
  const absl::Time t0 = absl::Now();
  const std::vector<EncodeItem>& items = w.items;
  REFIT_ASSIGN_OR_RETURN(std::vector<int64_t> changed, ops_->FinishCount(w.lane, deadline));
  const absl::Time t1 = absl::Now();
  delta_stats_.count_wait_seconds += absl::ToDoubleSeconds(t1 - t0);
  TimesOf(w).ready = Since();
  // Headers, and where each payload goes: dense ones are sent from where
  // they lie, deltas from the batch's encoding buffer.
  // An encoding goes only where it fits this rank's room and the
  // receiver's (w.peer_caps, the peers in w.msgs' order); else dense.
  std::vector<DeltaHeader> headers(items.size());
  std::vector<int64_t> at(items.size(), -1);
  int64_t coded = 0;
  std::vector<int64_t> peer_left = w.peer_caps;
  size_t peer = 0;
  int32_t of_peer = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    for (; of_peer == w.peers[peer].second; of_peer = 0) ++peer;
    ++of_peer;
    const int64_t n = items[i].bytes / items[i].word_bytes;
    DeltaEncoding e = items[i].snap == nullptr
                          ? DeltaEncoding::kDense
                          : ChooseEncoding(items[i].word_bytes, n, changed[i]);
    if (e != DeltaEncoding::kDense) {
      const int64_t need = Align16(DeltaPayloadBytes(e, items[i].word_bytes, n, changed[i]));
      if (need > peer_left[peer] || coded + need > w.coded_room) {
        e = DeltaEncoding::kDense;
        ++delta_stats_.dense_for_room;
      } else {
        peer_left[peer] -= need;
      }
    }
    const int64_t c = e == DeltaEncoding::kDense ? n : changed[i];
    DeltaHeader& h = headers[i];
    h.encoding = static_cast<uint8_t>(e);
    h.word_bytes = static_cast<uint8_t>(items[i].word_bytes);
    h.num_words = static_cast<uint64_t>(n);
    h.num_changed = static_cast<uint64_t>(c);
    h.payload_bytes = static_cast<uint64_t>(DeltaPayloadBytes(e, items[i].word_bytes, n, c));
    if (e != DeltaEncoding::kDense) {
      at[i] = coded;
      coded += Align16(static_cast<int64_t>(h.payload_bytes));
    }
  }
  // The lane's encoding buffer, once the lane's previous batch is sent
  // (claimed when packing, the batch may have begun before that batch was
  // posted: its sends are awaited now). A batch all dense needs none.
  if (coded > 0) {
    REFIT_RETURN_IF_ERROR(w.claimed ? DrainLane(w.lane, deadline) : ClaimFor(w, deadline));
  }
  REFIT_ASSIGN_OR_RETURN(char* encoded, CodedFor(w, coded));
  std::vector<char*> out(items.size(), nullptr);
  for (size_t i = 0; i < items.size(); ++i) {
    MsgWork& m = w.msgs[i];
    m.header = headers[i];
    m.payload = at[i] >= 0 ? encoded + at[i] : const_cast<char*>(items[i].cur);
    out[i] = at[i] >= 0 ? m.payload : nullptr;
  }
  REFIT_RETURN_IF_ERROR(ops_->Encode(w.lane, items, headers, out, w.headers, deadline));
  delta_stats_.encode_seconds += absl::ToDoubleSeconds(absl::Now() - t1);
  std::vector<SendOp> head;
  PayloadOps<SendOp> payloads;
  int64_t first = 0;
  for (const auto& [peer, count] : w.peers) {
    head.push_back({peer, w.headers + first * kHeader, count * kHeader});
    first += count;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const MsgWork& m = w.msgs[i];
    const int64_t p = static_cast<int64_t>(m.header.payload_bytes);
    payloads.Add(m.peer, static_cast<const void*>(m.payload), p, at[i] >= 0);
    ++delta_stats_.messages;
    if (m.header.encoding == static_cast<uint8_t>(DeltaEncoding::kDense)) {
      ++delta_stats_.dense_messages;
    }
    delta_stats_.dense_bytes += m.bytes;
    delta_stats_.wire_bytes += kHeader + p;
    delta_stats_.changed_words += changed[i];  // counted, also of dense ones
    delta_stats_.words += static_cast<int64_t>(m.header.num_words);
    stats->bytes_sent += kHeader + p;
  }
  // One group: per peer its headers, then its payloads; the engine
  // receives the headers in one group and the payloads, sized from them,
  // in the next (sends and receives match in order per pair and lane).
  std::vector<SendOp> sends = payloads.Take();
  delta_stats_.transfers += static_cast<int64_t>(sends.size());
  head.insert(head.end(), sends.begin(), sends.end());
  const absl::Time t2 = absl::Now();
  absl::Status s = Post(w.lane, std::move(head), {}, deadline);
  delta_stats_.transport_wait_seconds += absl::ToDoubleSeconds(absl::Now() - t2);
  TimesOf(w).posted = Since();
  return s;
}

absl::Status DeltaRunner::CheckRoom(const BatchWork& w, const std::vector<int64_t>& at,
                                     int64_t coded) const {
  // Per peer (w.msgs by peer): its encodings' bytes, within its cap.
  size_t first = 0;
  for (size_t p = 0; p < w.peers.size(); ++p) {
    const size_t end = first + static_cast<size_t>(w.peers[p].second);
    int64_t bytes = 0;
    for (size_t i = first; i < end; ++i) {
      if (at[i] >= 0) bytes += Align16(static_cast<int64_t>(w.msgs[i].header.payload_bytes));
    }
    if (bytes > w.peer_caps[p] || (end == w.msgs.size() && coded > w.coded_room)) {
      return absl::DataLossError(absl::StrCat(
          Context(w.msgs[first]), ": its sender's encodings in the batch take ", bytes,
          " bytes, above the ", std::min(w.peer_caps[p], w.coded_room),
          " its share of the staging budget allows"));
    }
    first = end;
  }
  return absl::OkStatus();
}

std::vector<RecvOp> DeltaRunner::HeaderReceives(const BatchWork& w) const {
  std::vector<RecvOp> head;
  int64_t first = 0;
  for (const auto& [peer, count] : w.peers) {
    head.push_back({peer, w.headers + first * kHeader, count * kHeader});
    first += count;
  }
  return head;
}

absl::Status DeltaRunner::BeginReceive(BatchWork& w, absl::Time deadline) {
  w.headers_posted = true;
  std::vector<SendOp> sends;
  if (!w.forwards.empty()) {
    REFIT_ASSIGN_OR_RETURN(sends, ForwardSends(w, deadline));
  }
  absl::Status s = Post(w.lane, std::move(sends), HeaderReceives(w), deadline);
  TimesOf(w).start = Since();
  return s;
}

absl::Status DeltaRunner::EndReceive(BatchWork& w, absl::Time deadline, RunStats* stats) {
  // The headers size the payloads: wait for this batch's (the lane's
  // earlier batches came first).
  const absl::Time t0 = absl::Now();
  REFIT_RETURN_IF_ERROR(DrainLane(w.lane, deadline));
  std::vector<DeltaHeader> headers(w.msgs.size());
  REFIT_RETURN_IF_ERROR(ops_->HeadersToHost(w.lane, w.headers, headers.data(),
                                            static_cast<int64_t>(headers.size()), deadline));
  delta_stats_.transport_wait_seconds += absl::ToDoubleSeconds(absl::Now() - t0);
  TimesOf(w).ready = Since();
  int64_t coded = 0;
  std::vector<int64_t> at(w.msgs.size(), -1);
  for (size_t i = 0; i < w.msgs.size(); ++i) {
    MsgWork& m = w.msgs[i];
    absl::StatusOr<DeltaHeader> h = ReadDeltaHeader(
        {reinterpret_cast<const uint8_t*>(&headers[i]), static_cast<size_t>(kHeader)});
    if (!h.ok()) return AnnotateStatus(h.status(), Context(m));
    if (h->word_bytes == 0 || static_cast<int64_t>(h->num_words * h->word_bytes) != m.bytes) {
      return absl::DataLossError(absl::StrCat(Context(m), ": the header describes ",
                                              h->num_words, " words of ", h->word_bytes,
                                              " bytes, the message has ", m.bytes));
    }
    m.header = *h;
    if (h->encoding != static_cast<uint8_t>(DeltaEncoding::kDense)) {
      at[i] = coded;
      coded += Align16(static_cast<int64_t>(h->payload_bytes));
    }
  }
  REFIT_RETURN_IF_ERROR(CheckRoom(w, at, coded));
  // The lane's staging and encoding buffer: the lane's previous batch
  // applied, unpacked and digested (a batch using neither waits for none).
  if (w.staging != nullptr || coded > 0) REFIT_RETURN_IF_ERROR(ClaimFor(w, deadline));
  REFIT_ASSIGN_OR_RETURN(char* encoded, CodedFor(w, coded));
  PayloadOps<RecvOp> payload_ops;
  std::vector<ResolvedCopy> gather, unpack;
  std::vector<ApplyItem> apply;
  std::vector<std::string> names;
  for (size_t i = 0; i < w.msgs.size(); ++i) {
    MsgWork& m = w.msgs[i];
    const bool dense = at[i] < 0;
    char* place = m.direct != nullptr ? m.direct : w.staging + m.stage_offset;
    m.payload = dense ? place : encoded + at[i];
    const int64_t p = static_cast<int64_t>(m.header.payload_bytes);
    // A relay sends each payload on its own (kept apart, relay.cc).
    payload_ops.Add(m.peer, static_cast<void*>(m.payload), p,
                    !dense && !plan_->messages[m.message].relay);
    if (m.direct == nullptr) {
      if (!dense) {  // the engine's own bytes of the message, to apply to
        REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> g, CurrentCopies(w, m));
        gather.insert(gather.end(), g.begin(), g.end());
      }
      REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> u,
                             ResolveTasks(m.tasks, {}, buffers_, place, nullptr));
      unpack.insert(unpack.end(), u.begin(), u.end());
    }
    if (!dense) {
      apply.push_back({m.header, m.payload, place});
      names.push_back(Context(m));
    }
    ++delta_stats_.messages;
    if (dense) ++delta_stats_.dense_messages;
    delta_stats_.dense_bytes += m.bytes;
    delta_stats_.wire_bytes += kHeader + p;
    delta_stats_.changed_words += static_cast<int64_t>(m.header.num_changed);
    delta_stats_.words += static_cast<int64_t>(m.header.num_words);
    stats->bytes_received += kHeader + p;
  }
  if (!gather.empty()) {
    REFIT_RETURN_IF_ERROR(copier_->Copy(w.lane, gather));
    if (!copier_->OrderedWithTransport()) REFIT_RETURN_IF_ERROR(copier_->Sync(w.lane, deadline));
  }
  // The next batch of this lane: its headers come after these payloads on
  // the lane (the trainer sends them in that order), so their receive joins
  // this group. Not on a transport that holds one group a lane (the host's):
  // its applies wait for the payloads, which must not wait for the next
  // headers. Nor when a batch between the two forwards: its forwards wait
  // for every lane's earlier work (ForwardSends), and a receive of later
  // headers on this lane would hold them until the sender reaches that
  // later batch, which it may only do once the forwarding batch is
  // received.
  std::vector<RecvOp> payloads = payload_ops.Take();
  delta_stats_.transfers += static_cast<int64_t>(payloads.size());
  if (w.next_on_lane >= 0 && ops_->OrderedWithTransport()) {
    BatchWork& next = work_[w.next_on_lane];
    bool forward_between = false;
    for (int32_t j = static_cast<int32_t>(&w - work_.data()) + 1; j < w.next_on_lane; ++j) {
      forward_between = forward_between || !work_[j].forwards.empty();
    }
    if (!next.headers_posted && next.forwards.empty() && !forward_between) {
      std::vector<RecvOp> head = HeaderReceives(next);
      payloads.insert(payloads.end(), head.begin(), head.end());
      next.headers_posted = true;
    }
  }
  // A relay's forwarded payloads go here, not with its headers: two relays
  // forwarding to each other in one batch each post these only once their
  // headers arrived, so neither waits for the other's payload receive
  // inside its headers' group.
  REFIT_RETURN_IF_ERROR(Post(w.lane, std::move(w.forward_payloads), std::move(payloads), deadline));
  w.forward_payloads.clear();
  if (!w.forwards.empty()) ForwardsPosted(w);
  TimesOf(w).posted = Since();
  if (!ops_->OrderedWithTransport()) REFIT_RETURN_IF_ERROR(DrainLane(w.lane, deadline));
  // Ordered after the receive on the lane (device), or after it completed.
  const absl::Time t1 = absl::Now();
  REFIT_RETURN_IF_ERROR(KeepPayloads(w));
  REFIT_RETURN_IF_ERROR(ops_->Apply(w.lane, apply, std::move(names), deadline));
  if (!unpack.empty()) REFIT_RETURN_IF_ERROR(copier_->Copy(w.lane, unpack));
  delta_stats_.apply_seconds += absl::ToDoubleSeconds(absl::Now() - t1);
  TimesOf(w).applied = Since();
  // Verified rounds: digest what the batch left in the buffers, behind it.
  if (options_.digest) REFIT_RETURN_IF_ERROR(DigestBatch(w, deadline));
  return absl::OkStatus();
}

}  // namespace refit
