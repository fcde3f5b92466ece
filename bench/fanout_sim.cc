// fanout_sim: the plan of testing/netns/run.sh fanout's scenario, run on a
// model of its links, to see where a relay schedule loses time without
// the namespaces (a program that prints figures, not a test).
//
// One trainer host holds the trainer's ranks; engine replica i's ranks are
// on host 1 + i. Every host's link carries --mbit megabits per second each
// way; flows across hosts share a host's link max-min fairly (as TCP flows
// through one tbf roughly do), flows inside a host run at --local_mbps. The
// ranks follow the executor's rules (exec/executor.cc, per-wave path): a
// wave waits for its lane's previous wave, a wave with relay sends for
// every lane's, and a message moves once both ends posted it (Gloo's
// unbound buffers). Prints the round's time, the waves and each host's
// busy share.
//
//   bazel run -c opt //bench:fanout_sim -- [--model=PATH] [--trainer=megatron:tp=2]
//       [--engine=vllm:tp=2] [--replicas=8] [--relay=on] [--staging_mib=1]
//       [--lanes=2] [--mbit=32] [--local_mbps=400] [--wave_ms=1]
//       [--wave_kib=N] [--msg_kib=N] [--verbose] [--waves]
// --wave_kib / --msg_kib lower the plan's wave and message caps; --waves
// prints each wave's KiB received/sent per rank.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "job/job_plan.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"

namespace refit {
namespace {

// Small Qwen3-shaped model (the netns fan-out test's default).
constexpr char kModel[] = R"({"model_type": "qwen3", "hidden_size": 256,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
 "intermediate_size": 768, "num_hidden_layers": 4, "vocab_size": 4096,
 "tie_word_embeddings": false})";

struct Flags {
  std::string model, trainer = "megatron:tp=2", engine = "vllm:tp=2";
  int replicas = 8, lanes = 2;
  bool relay = true;
  double staging_mib = 1, mbit = 32, local_mbps = 400, wave_ms = 1, wave_kib = 0, msg_kib = 0;
  bool verbose = false;  // each host's bytes and busy share
  bool waves = false;    // each wave's KiB in/out per rank (trainer ranks first)
};

struct Op {
  int rank, peer, lane;
  int64_t bytes;
  bool send;
};

struct RankWave {
  int lane;
  bool relays;
  std::vector<int> ops;  // indices into Sim::ops
};

class Sim {
 public:
  Sim(const Plan& plan, const Flags& f) : f_(f) {
    const int s = plan.src.world_size, d = plan.dst.world_size;
    world_ = s + d;
    host_.resize(world_);
    for (int r = 0; r < s; ++r) host_[r] = plan.src.host_of_rank[r];
    for (int r = 0; r < d; ++r) host_[s + r] = plan.dst.host_of_rank[r];
    hosts_ = *std::max_element(host_.begin(), host_.end()) + 1;
    waves_.resize(world_);
    const int lanes = plan.options.num_lanes;
    for (size_t wi = 0; wi < plan.waves.size(); ++wi) {
      const Wave& w = plan.waves[wi];
      std::map<int, RankWave> per;
      for (int mi = w.first_message; mi < w.first_message + w.num_messages; ++mi) {
        const Message& m = plan.messages[mi];
        const int a = m.relay ? s + m.src_rank : m.src_rank, b = s + m.dst_rank;
        const int lane = w.lane % lanes;
        RankWave& ra = per.try_emplace(a, RankWave{lane, false, {}}).first->second;
        ra.relays = ra.relays || m.relay;
        ra.ops.push_back(static_cast<int>(ops_.size()));
        ops_.push_back(Op{a, b, lane, m.bytes, true});
        RankWave& rb = per.try_emplace(b, RankWave{lane, false, {}}).first->second;
        rb.ops.push_back(static_cast<int>(ops_.size()));
        ops_.push_back(Op{b, a, lane, m.bytes, false});
      }
      for (auto& [r, rw] : per) waves_[r].push_back(std::move(rw));
    }
    lanes_ = lanes;
  }

  // Runs the round; returns its seconds.
  double Run() {
    const double cap = f_.mbit * 1e6 / 8;
    next_.assign(world_, 0);
    in_flight_.assign(world_, std::vector<int>(lanes_, -1));
    ready_at_.assign(world_, 0);
    remaining_ops_.clear();
    busy_out_.assign(hosts_, 0);
    busy_in_.assign(hosts_, 0);
    double t = 0;
    for (int r = 0; r < world_; ++r) Advance(r, t);
    std::vector<double> rate;
    while (true) {
      // Max-min fair rates: constraints are host egress (h) and ingress
      // (hosts_ + h); local flows run at local_mbps.
      rate.assign(flows_.size(), 0);
      std::vector<char> frozen(flows_.size(), 0);
      std::vector<double> left(2 * hosts_, cap);
      size_t unfrozen = 0;
      for (size_t i = 0; i < flows_.size(); ++i) {
        const Flow& fl = flows_[i];
        if (host_[fl.a] == host_[fl.b]) {
          rate[i] = f_.local_mbps * 1e6;
          frozen[i] = 1;
        } else {
          ++unfrozen;
        }
      }
      while (unfrozen > 0) {
        std::vector<int> count(2 * hosts_, 0);
        for (size_t i = 0; i < flows_.size(); ++i) {
          if (frozen[i]) continue;
          ++count[host_[flows_[i].a]];
          ++count[hosts_ + host_[flows_[i].b]];
        }
        int best = -1;
        for (int c = 0; c < 2 * hosts_; ++c) {
          if (count[c] == 0) continue;
          if (best < 0 || left[c] / count[c] < left[best] / count[best]) best = c;
        }
        const double share = left[best] / count[best];
        for (size_t i = 0; i < flows_.size(); ++i) {
          if (frozen[i]) continue;
          const int ca = host_[flows_[i].a], cb = hosts_ + host_[flows_[i].b];
          if (ca != best && cb != best) continue;
          rate[i] = share;
          frozen[i] = 1;
          --unfrozen;
          left[ca] -= share;
          left[cb] -= share;
        }
      }
      // Next event: a flow finishing or a rank's wave overhead ending.
      double dt = std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < flows_.size(); ++i) dt = std::min(dt, flows_[i].left / rate[i]);
      for (int r = 0; r < world_; ++r) {
        if (ready_at_[r] > t) dt = std::min(dt, ready_at_[r] - t);
      }
      if (dt == std::numeric_limits<double>::infinity()) break;
      for (size_t i = 0; i < flows_.size(); ++i) {
        const double moved = rate[i] * dt;
        flows_[i].left -= moved;
        if (host_[flows_[i].a] != host_[flows_[i].b]) {
          busy_out_[host_[flows_[i].a]] += moved;
          busy_in_[host_[flows_[i].b]] += moved;
        }
      }
      t += dt;
      std::vector<Flow> still;
      for (const Flow& fl : flows_) {
        if (fl.left > 1e-6) {
          still.push_back(fl);
          continue;
        }
        for (int op : {fl.send_op, fl.recv_op}) --remaining_ops_[ops_[op].rank * 64 + ops_[op].lane];
      }
      flows_ = std::move(still);
      for (int r = 0; r < world_; ++r) Advance(r, t);
    }
    for (int r = 0; r < world_; ++r) {
      if (next_[r] != static_cast<int>(waves_[r].size())) {
        std::printf("stuck: rank %d at wave %d of %zu\n", r, next_[r], waves_[r].size());
      }
    }
    return t;
  }

  double busy_out(int h) const { return busy_out_[h]; }
  double busy_in(int h) const { return busy_in_[h]; }
  int hosts() const { return hosts_; }

 private:
  struct Flow {
    int a, b;  // sender, receiver
    double left;
    int send_op, recv_op;
  };

  bool LaneIdle(int r, int lane) const { return in_flight_[r][lane] < 0; }

  // Completes finished waves and posts what the executor would post next.
  void Advance(int r, double t) {
    for (int l = 0; l < lanes_; ++l) {
      if (in_flight_[r][l] >= 0 && remaining_ops_[r * 64 + l] == 0) {
        in_flight_[r][l] = -1;
        ready_at_[r] = std::max(ready_at_[r], t + f_.wave_ms / 1e3);
      }
    }
    if (ready_at_[r] > t + 1e-12) return;
    while (next_[r] < static_cast<int>(waves_[r].size())) {
      const RankWave& w = waves_[r][next_[r]];
      bool ok = LaneIdle(r, w.lane);
      for (int l = 0; l < lanes_ && w.relays; ++l) ok = ok && LaneIdle(r, l);
      if (!ok) return;
      in_flight_[r][w.lane] = next_[r];
      remaining_ops_[r * 64 + w.lane] = static_cast<int>(w.ops.size());
      for (int op : w.ops) Post(op);
      ++next_[r];
    }
  }

  // Posts one op; starts a flow when the peer posted its side.
  void Post(int op) {
    const Op& o = ops_[op];
    const int a = o.send ? o.rank : o.peer, b = o.send ? o.peer : o.rank;
    auto& q = pending_key_[{a, b, o.lane}];
    auto& mine = o.send ? q.sends : q.recvs;
    auto& other = o.send ? q.recvs : q.sends;
    if (other.empty()) {
      mine.push_back(op);
      return;
    }
    const int peer_op = other.front();
    other.pop_front();
    flows_.push_back(Flow{a, b, static_cast<double>(o.bytes), o.send ? op : peer_op,
                          o.send ? peer_op : op});
  }

  struct Queues {
    std::deque<int> sends, recvs;
  };
  const Flags& f_;
  int world_ = 0, hosts_ = 0, lanes_ = 1;
  std::vector<int> host_;
  std::vector<Op> ops_;
  std::vector<std::vector<RankWave>> waves_;
  std::vector<int> next_;
  std::vector<std::vector<int>> in_flight_;
  std::vector<double> ready_at_;
  std::map<int, int> remaining_ops_;
  std::map<std::tuple<int, int, int>, Queues> pending_key_;
  std::vector<Flow> flows_;
  std::vector<double> busy_out_, busy_in_;
};

int Main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](const char* name) -> const char* {
      const std::string p = absl::StrCat("--", name, "=");
      return a.rfind(p, 0) == 0 ? argv[i] + p.size() : nullptr;
    };
    const char* v;
    if ((v = val("model"))) f.model = v;
    else if ((v = val("trainer"))) f.trainer = v;
    else if ((v = val("engine"))) f.engine = v;
    else if ((v = val("replicas"))) f.replicas = std::atoi(v);
    else if ((v = val("lanes"))) f.lanes = std::atoi(v);
    else if ((v = val("relay"))) f.relay = std::string(v) == "on";
    else if ((v = val("staging_mib"))) f.staging_mib = std::atof(v);
    else if ((v = val("mbit"))) f.mbit = std::atof(v);
    else if ((v = val("local_mbps"))) f.local_mbps = std::atof(v);
    else if ((v = val("wave_ms"))) f.wave_ms = std::atof(v);
    else if ((v = val("wave_kib"))) f.wave_kib = std::atof(v);
    else if ((v = val("msg_kib"))) f.msg_kib = std::atof(v);
    else if (a == "--verbose") f.verbose = true;
    else if (a == "--waves") f.waves = true;
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  absl::StatusOr<ModelConfig> model =
      f.model.empty() ? ParseModelConfig(kModel) : LoadModelConfig(f.model);
  absl::StatusOr<TrainerSpec> ts = ParseTrainerSpec(f.trainer);
  absl::StatusOr<EngineSpec> es = ParseEngineSpec(
      f.replicas > 1 ? absl::StrCat(f.engine, ",dp=", f.replicas) : f.engine);
  if (!model.ok() || !ts.ok() || !es.ok()) {
    std::fprintf(stderr, "bad model or spec\n");
    return 2;
  }
  JobSpec job;
  job.model = *model;
  job.trainer = *ts;
  job.engines.push_back(JobEngine{"engine", *es});
  const int per = es->world_size() / f.replicas;
  for (int r = 0; r < ts->world_size(); ++r) job.placement.trainer_hosts.push_back("h1");
  for (int r = 0; r < es->world_size(); ++r) {
    job.placement.engine_hosts.push_back(absl::StrCat("h", 2 + r / per));
  }
  job.planner.staging_budget_bytes = static_cast<int64_t>(f.staging_mib * (1 << 20));
  job.planner.num_lanes = f.lanes;
  job.planner.relay = f.relay;
  job.planner.max_wave_bytes = static_cast<int64_t>(f.wave_kib * 1024);
  job.planner.max_message_bytes = static_cast<int64_t>(f.msg_kib * 1024);
  absl::StatusOr<Plan> plan = BuildJobPlan(job);
  if (!plan.ok()) {
    std::fprintf(stderr, "%s\n", plan.status().ToString().c_str());
    return 1;
  }
  if (f.waves) {
    const int s = plan->src.world_size, d = plan->dst.world_size;
    for (size_t wi = 0; wi < plan->waves.size(); ++wi) {
      std::vector<int64_t> in(s + d, 0), out(s + d, 0);
      const Wave& w = plan->waves[wi];
      for (int mi = w.first_message; mi < w.first_message + w.num_messages; ++mi) {
        const Message& m = plan->messages[mi];
        out[m.relay ? s + m.src_rank : m.src_rank] += m.bytes;
        in[s + m.dst_rank] += m.bytes;
      }
      std::printf("w%3zu", wi);
      for (int r = 0; r < s + d; ++r) std::printf(" %3lld/%3lld", (long long)in[r] >> 10, (long long)out[r] >> 10);
      std::printf("\n");
    }
  }
  Sim sim(*plan, f);
  const double t = sim.Run();
  std::printf("relay %s: %zu waves, %zu messages, depth %d, simulated %.2f s\n",
              f.relay ? "on" : "off", plan->waves.size(), plan->messages.size(),
              plan->stats.relay_depth, t);
  if (f.verbose) {
    for (int h = 0; h < sim.hosts(); ++h) {
      const double cap = f.mbit * 1e6 / 8 * t;
      std::printf("  host %d: out %.2f MB (%.0f%% busy), in %.2f MB (%.0f%% busy)\n", h,
                  sim.busy_out(h) / 1e6, 100 * sim.busy_out(h) / cap, sim.busy_in(h) / 1e6,
                  100 * sim.busy_in(h) / cap);
    }
  }
  return 0;
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) { return refit::Main(argc, argv); }
