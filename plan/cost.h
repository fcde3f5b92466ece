// The refit time model the planner optimizes and reports. A byte between a
// source and a destination rank moves over one of three link classes: on
// one GPU (a device-local copy, when both ranks' gpu_of_rank name the same
// GPU), between GPUs of one host (NVLink), or between hosts (the network),
// each at its speed from PlannerOptions::links. A rank's time is its bytes
// (sent for a source rank, received for a destination rank) at those
// speeds; the refit takes the slowest rank's time. With relays an engine
// rank also sends (forwards bytes to other engine ranks): its ingress and
// egress are counted apart (full duplex) and its time is the larger.
#ifndef REFIT_PLAN_COST_H_
#define REFIT_PLAN_COST_H_

#include <array>
#include <cstdint>
#include <vector>

#include "layout/layout.h"
#include "plan/plan.h"

namespace refit {

// The link classes, fastest first with the default speeds.
enum class LinkClass : int32_t { kSameGpu = 0, kSameHost = 1, kInterHost = 2 };
inline constexpr int kNumLinkClasses = 3;

// A rank's bytes per link class (indexed by LinkClass).
struct LinkBytes {
  std::array<int64_t, kNumLinkClasses> bytes{};
  void Add(LinkClass c, int64_t b) { bytes[static_cast<int>(c)] += b; }
};

// Link classes of (src rank, dst rank) pairs under a placement.
class CostModel {
 public:
  // `src` and `dst` give host_of_rank (both, with one entry per rank, for
  // the placement to count; otherwise every pair is inter-host) and
  // optionally gpu_of_rank (one entry per rank; -1 unknown). The speeds
  // are taken from options.links (GB/s, 1e9 bytes per second); options
  // must be valid (positive speeds).
  CostModel(const SideLayout& src, const SideLayout& dst,
            const PlannerOptions& options);

  // Returns the class of src rank `s` to dst rank `d`: kSameGpu when both
  // GPUs are known and equal, kSameHost when the hosts are equal,
  // kInterHost otherwise (also when the placement is unknown or a rank is
  // out of range).
  LinkClass ClassOf(int32_t s, int32_t d) const {
    if (static_cast<uint32_t>(s) >= src_n_ || static_cast<uint32_t>(d) >= dst_n_ ||
        src_host_[s] != dst_host_[d]) {
      return LinkClass::kInterHost;
    }
    if (gpus_known_ && src_gpu_[s] >= 0 && src_gpu_[s] == dst_gpu_[d]) {
      return LinkClass::kSameGpu;
    }
    return LinkClass::kSameHost;
  }
  // Returns the class of engine rank `a` to engine rank `b` (a relay):
  // kSameGpu when both GPUs are known and equal, kSameHost when the hosts
  // are equal, kInterHost otherwise (also when the placement is unknown or
  // a rank is out of range).
  LinkClass EngineClassOf(int32_t a, int32_t b) const {
    if (static_cast<uint32_t>(a) >= dst_n_ || static_cast<uint32_t>(b) >= dst_n_ ||
        dst_host_[a] != dst_host_[b]) {
      return LinkClass::kInterHost;
    }
    if (gpus_known_ && dst_gpu_[a] >= 0 && dst_gpu_[a] == dst_gpu_[b]) {
      return LinkClass::kSameGpu;
    }
    return LinkClass::kSameHost;
  }
  // Returns engine rank e's host (host_of_rank) when the placement is
  // known, else -1 - e (every rank a host of its own).
  int32_t EngineHost(int32_t e) const { return known_ ? dst_host_[e] : -1 - e; }

  // Returns the seconds per byte of class `c`.
  double SecondsPerByte(LinkClass c) const { return spb_[static_cast<int>(c)]; }

  // Returns the seconds a rank takes for `b`.
  double Seconds(const LinkBytes& b) const {
    return static_cast<double>(b.bytes[0]) * spb_[0] +
           static_cast<double>(b.bytes[1]) * spb_[1] +
           static_cast<double>(b.bytes[2]) * spb_[2];
  }

  // Returns the seconds a rank takes for `b` plus `extra` bytes of class `c`
  // (bytes added before they are timed: the same figure Seconds gives once
  // they are added).
  double SecondsWith(LinkBytes b, LinkClass c, int64_t extra) const {
    b.Add(c, extra);
    return Seconds(b);
  }

  // Returns whether the placement (hosts) is known.
  bool placement_known() const { return known_; }

 private:
  // The sides' host_of_rank and gpu_of_rank (the GPUs read only when
  // gpus_known_), and their ranks when the placement is known, else 0:
  // every rank is then out of range, so every pair is inter-host.
  const int32_t* src_host_;
  const int32_t* dst_host_;
  const int32_t* src_gpu_;
  const int32_t* dst_gpu_;
  uint32_t src_n_;
  uint32_t dst_n_;
  bool known_;
  bool gpus_known_;  // known_ and gpu_of_rank has one entry per rank on both sides
  std::array<double, kNumLinkClasses> spb_;  // seconds per byte
};

// Each rank's bytes per link class for a plan's messages, and the slowest
// rank's time under a CostModel: a trainer rank's sends, an engine rank's
// receives, and apart from those (full duplex) its relay sends.
class RankLoads {
 public:
  RankLoads(int32_t src_world, int32_t dst_world);

  // Adds message `m` (ranks within the worlds) carrying `bytes` (its own
  // m.bytes, or what it would carry in other dtypes) under `cost`.
  void Add(const CostModel& cost, const Message& m, int64_t bytes);

  struct Slowest {
    double seconds = 0;
    bool trainer = true;  // the rank is a trainer rank (else an engine rank)
    int32_t rank = -1;    // -1: no rank has bytes
  };
  // Returns the slowest rank and its seconds under `cost`: ties go to the
  // lower rank, trainer ranks first.
  Slowest SlowestRank(const CostModel& cost) const;

 private:
  std::vector<LinkBytes> src_, dst_, forwarded_;
};

// Returns the slowest rank's seconds for `plan`'s messages (its own
// placement) at `links`: plan.stats.predicted_seconds when `links` are the
// speeds it was planned with. A relay message counts on its engine
// sender's egress, apart from that rank's ingress (full duplex).
// `by_class` (may be null) gets all bytes per link class. The plan's
// ranks must lie within its worlds (a plan from BuildPlan or FromProto).
double PredictedSeconds(const Plan& plan, const LinkSpeeds& links,
                        LinkBytes* by_class = nullptr);

// The link speeds of members that move host memory over Gloo (TCP), not
// GPU links: loopback TCP between the processes of one host, 1 GB/s (what
// tools/demo measured per engine rank on a 2-core x86-64 host at best,
// 2026-11-25; README), and a 10 Gb/s network between hosts, 1.25 GB/s.
LinkSpeeds GlooLinkSpeeds();

}  // namespace refit

#endif  // REFIT_PLAN_COST_H_
