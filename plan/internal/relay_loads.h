// The loads ChooseRelaySources (relays.h) weighs its options against:
// per trainer rank its egress, per engine rank its ingress and its egress
// (full duplex), and what one more transfer would make of them.
#ifndef REFIT_PLAN_INTERNAL_RELAY_LOADS_H_
#define REFIT_PLAN_INTERNAL_RELAY_LOADS_H_

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "plan/cost.h"
#include "plan/plan.h"

namespace refit {
namespace internal_plan {

// What one source for one transfer costs; smaller is better.
struct Option {
  double t = 0;       // the larger of both ranks' times after, at least the floor
  double spb = 0;     // seconds per byte of its link
  int32_t depth = 0;  // hops after the trainer side
  double t_send = 0;  // the sender's time after
  double t_recv = 0;  // the receiver's time after
  bool operator<(const Option& o) const {
    return std::tie(t, spb, depth, t_send, t_recv) <
           std::tie(o.t, o.spb, o.depth, o.t_send, o.t_recv);
  }
};

// One transfer whose sources are being weighed: `bytes` to engine rank
// `dst`. Its receiver's side of an option depends only on the link class,
// so it is computed once per class (Loads::RecvTime) and shared by every
// sender offered.
// `reserved`: the class its bytes are reserved at on its engine rank
// (Loads::Reserve), which they leave when they take their link; -1: none.
class Transfer {
 public:
  Transfer(int32_t dst, int64_t bytes, int reserved = -1)
      : dst_(dst), bytes_(bytes), reserved_(reserved) {}
  int32_t dst() const { return dst_; }
  int64_t bytes() const { return bytes_; }

 private:
  friend class Loads;
  int32_t dst_;
  int64_t bytes_;
  int reserved_;
  double t_recv_[kNumLinkClasses] = {};
  uint8_t known_ = 0;  // bit c: t_recv_[c] is computed
};

// Per-rank loads: trainer egress, engine ingress and engine egress, each
// with its time under the cost model kept beside it (the same figure
// CostModel::Seconds gives).
class Loads {
 public:
  Loads(const CostModel& cost, int32_t src_world, int32_t dst_world)
      : cost_(&cost),
        src_out_(src_world),
        in_(dst_world),
        out_(dst_world),
        in_sec_(dst_world, 0.0),
        out_sec_(dst_world, 0.0) {}

  // The link class of trainer rank r to x's engine rank.
  LinkClass DirectClass(int32_t r, const Transfer& x) const { return cost_->ClassOf(r, x.dst_); }
  // Trainer rank r's time after sending x's bytes over class lc.
  double SendTime(int32_t r, LinkClass lc, const Transfer& x) const {
    return cost_->SecondsWith(src_out_[r], lc, x.bytes_);
  }
  // The option of a trainer rank sending x's bytes over class lc, its time
  // after them `t_send` (SendTime).
  Option Direct(LinkClass lc, double t_send, Transfer* x, double floor) const {
    Option o;
    o.spb = cost_->SecondsPerByte(lc);
    o.t_send = t_send;
    o.t_recv = RecvTime(x, lc);
    o.t = std::max({o.t_send, o.t_recv, floor});
    return o;
  }
  // The option of trainer rank r sending x's bytes to x's engine rank.
  Option Direct(int32_t r, Transfer* x, double floor) const {
    const LinkClass lc = DirectClass(r, *x);
    return Direct(lc, SendTime(r, lc, *x), x, floor);
  }
  // The option of engine rank e forwarding x's bytes to x's engine rank.
  Option Relay(int32_t e, Transfer* x, int32_t depth, double floor) const {
    const LinkClass lc = cost_->EngineClassOf(e, x->dst_);
    Option o;
    o.spb = cost_->SecondsPerByte(lc);
    o.depth = depth;
    o.t_send = std::max(in_sec_[e], cost_->SecondsWith(out_[e], lc, x->bytes_));
    o.t_recv = RecvTime(x, lc);
    o.t = std::max({o.t_send, o.t_recv, floor});
    return o;
  }
  void AddDirect(int32_t r, int32_t d, int64_t b) {
    const LinkClass lc = cost_->ClassOf(r, d);
    src_out_[r].Add(lc, b);
    AddIn(d, lc, b);
  }
  void AddRelay(int32_t e, int32_t d, int64_t b) {
    const LinkClass lc = cost_->EngineClassOf(e, d);
    out_[e].Add(lc, b);
    out_sec_[e] = cost_->Seconds(out_[e]);
    AddIn(d, lc, b);
  }
  // Counts `b` bytes into engine rank d over class lc before their source
  // is chosen (their best link), so that its time says what it will
  // receive in all; Unreserve takes them out again when they are fed.
  void Reserve(int32_t d, LinkClass lc, int64_t b) { AddIn(d, lc, b); }
  void Unreserve(int32_t d, LinkClass lc, int64_t b) { AddIn(d, lc, -b); }
  // Engine rank d's ingress time were `b` of its bytes over class `from`
  // over class `to` instead (ShiftIn does it).
  double InTimeShifted(int32_t d, LinkClass from, LinkClass to, int64_t b) const {
    LinkBytes in = in_[d];
    in.Add(from, -b);
    return cost_->SecondsWith(in, to, b);
  }
  void ShiftIn(int32_t d, LinkClass from, LinkClass to, int64_t b) {
    in_[d].Add(from, -b);
    AddIn(d, to, b);
  }
  // Returns the slowest rank's time.
  double Slowest() const {
    double t = 0;
    for (const LinkBytes& l : src_out_) t = std::max(t, cost_->Seconds(l));
    for (double s : in_sec_) t = std::max(t, s);
    for (double s : out_sec_) t = std::max(t, s);
    return t;
  }
  // Adds the bytes sent per link class (trainer and engine senders) to
  // *stats.
  void CountLinks(PlanStats* stats) const {
    for (const auto* side : {&src_out_, &out_}) {
      for (const LinkBytes& l : *side) {
        stats->same_gpu_bytes += l.bytes[static_cast<int>(LinkClass::kSameGpu)];
        stats->intra_host_bytes += l.bytes[static_cast<int>(LinkClass::kSameHost)];
        stats->inter_host_bytes += l.bytes[static_cast<int>(LinkClass::kInterHost)];
      }
    }
  }
  double SrcTime(int32_t r) const { return cost_->Seconds(src_out_[r]); }
  double InTime(int32_t d) const { return in_sec_[d]; }

 private:
  // x's engine rank's time after x's bytes over class lc: the larger of
  // its ingress with them and its egress.
  double RecvTime(Transfer* x, LinkClass lc) const {
    const int c = static_cast<int>(lc);
    if ((x->known_ >> c & 1) == 0) {
      double in;
      if (x->reserved_ < 0) {
        in = cost_->SecondsWith(in_[x->dst_], lc, x->bytes_);
      } else {
        LinkBytes b = in_[x->dst_];
        b.bytes[x->reserved_] -= x->bytes_;
        in = cost_->SecondsWith(b, lc, x->bytes_);
      }
      x->t_recv_[c] = std::max(in, out_sec_[x->dst_]);
      x->known_ |= static_cast<uint8_t>(1 << c);
    }
    return x->t_recv_[c];
  }
  void AddIn(int32_t d, LinkClass lc, int64_t b) {
    in_[d].Add(lc, b);
    in_sec_[d] = cost_->Seconds(in_[d]);
  }

  const CostModel* cost_;
  std::vector<LinkBytes> src_out_, in_, out_;
  std::vector<double> in_sec_, out_sec_;  // Seconds(in_[d]), Seconds(out_[e])
};

}  // namespace internal_plan
}  // namespace refit

#endif  // REFIT_PLAN_INTERNAL_RELAY_LOADS_H_
