// refit_demo_member: one trainer rank or engine worker of the demo refit,
// as its own process, using the client library exactly as a real member
// would (client/member.h, what the C ABI and Python wrap): it builds its
// local buffers by its convention (mapping tables), registers them with
// refitd, awaits its plan slice, and takes part in
// rounds over the host (Gloo/TCP) transport. Trainer ranks fill their
// buffers with the pattern of weight version v before round v; engine
// ranks check, after refitd committed round v, that every byte of every
// record of theirs holds version v's value — computed from their own
// mapping, independently of the plan.
//
// Flags (--name=value):
//   --server=HOST:PORT  refitd            --side=trainer|engine
//   --engine_id=ID (engines)              --rank=R
//   --model=NAME        built-in model    --convention=SPEC (megatron:tp=2 / vllm:tp=2)
//   --rounds=N (1)      rounds to take part in
//   --start             start rounds 1..N (trainer rank 0)
//   --deadline_s=S (120) bound of every wait
//   --verify            executor verify mode (per-segment checksums)
//   --device=cuda:N     buffers in GPU N's memory, NCCL transport (only in
//                       the CUDA build, refit_demo_member_gpu); the pattern
//                       is then filled and checked by the GPU
//                       (testing/gpu_pattern.h) where every engine tensor is a
//                       plain copy, else through host copies
//   --transport=pull    with --device: the colocated pull path
//                       (client/pull_data_plane.h) instead of NCCL
//   --staged            engine ranks stage each round (DataPlaneOptions::
//                       staging): received while the live buffers stay as
//                       they are, applied once every engine rank holds it;
//                       the round line then ends with the pause
//   --delta_every=N     rounds 2.. change about 1/N of the words of round
//                       1's pattern (testing::FillMemberDelta), for refitd
//                       --delta: delta rounds of that density
//   --test_round_delay_ms=N  engine ranks wait N ms before each round's data
//                       plane (only in refit_demo_member_slow, for tests)
// Prints one line per event; the last line is "ok ..." or "error ...".
// Exit code 0 only if every round committed and every check passed.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/data_plane.h"
#include "client/member.h"
#include "client/refit_client.h"
#include "common/member_name.h"
#include "common/status_macros.h"
#include "mapping/layout_builder.h"
#include "testing/member_patterns.h"

#ifdef REFIT_DEMO_CUDA
#include <cuda_runtime_api.h>

#include "client/nccl_data_plane.h"
#include "client/pull_data_plane.h"
#include "exec/cuda/cuda_status.h"
#include "mapping/model_config.h"
#include "mapping/model_family.h"
#include "testing/gpu_pattern.h"
#endif

namespace refit {
namespace {

struct Flags {
  std::map<std::string, std::string> f;
  std::string Get(const std::string& k, const std::string& d = "") const {
    auto it = f.find(k);
    return it == f.end() ? d : it->second;
  }
  int64_t Int(const std::string& k, int64_t d) const {
    int64_t v = d;
    if (f.count(k) && !absl::SimpleAtoi(f.at(k), &v)) v = d;
    return v;
  }
};

int Fail(const std::string& who, const absl::Status& s) {
  std::printf("error %s: %s\n", who.c_str(), s.ToString().c_str());
  std::fflush(stdout);
  return 1;
}

int Main(const Flags& fl) {
  const bool trainer = fl.Get("side") == "trainer";
  const int32_t rank = static_cast<int32_t>(fl.Int("rank", 0));
  const std::string who = MemberName(trainer, fl.Get("engine_id"), rank);
  const absl::Duration wait = absl::Seconds(fl.Int("deadline_s", 120));
  const int64_t rounds = fl.Int("rounds", 1);

  // The member's own view of its buffers: its convention, its rank.
  MemberOptions o;
  o.connection.target = fl.Get("server");
  o.connection.heartbeat_interval = absl::Milliseconds(500);
  o.job = "demo";
  o.side = trainer ? Side::kTrainer : Side::kEngine;
  o.engine_id = trainer ? "" : fl.Get("engine_id");
  o.rank = rank;
  o.model = fl.Get("model");
  o.convention = fl.Get("convention");
  o.host_id = "localhost";
  const std::string device = fl.Get("device");
  o.device = device.empty() ? "cpu" : device;
  absl::StatusOr<std::vector<LocalBuffer>> mine = ExpectedBuffers(o);
  if (!mine.ok()) return Fail(who, mine.status());

  // Allocate (once; never moved). With --device, the registered buffers
  // live on the GPU and `host` holds their host mirrors for filling and
  // checking; without, `host` stays empty and the registered host buffers
  // are filled and checked directly.
  [[maybe_unused]] int gpu = -1;
  if (!device.empty()) {
#ifdef REFIT_DEMO_CUDA
    if (device.rfind("cuda:", 0) != 0 || !absl::SimpleAtoi(device.substr(5), &gpu)) {
      return Fail(who, absl::InvalidArgumentError("--device must be cuda:N"));
    }
    absl::Status s = CudaStatus(cudaSetDevice(gpu), absl::StrCat("cudaSetDevice(", gpu, ")"));
    if (!s.ok()) return Fail(who, s);
#else
    return Fail(who, absl::InvalidArgumentError(
                         "--device needs refit_demo_member_gpu (CUDA build)"));
#endif
  }
  std::vector<std::vector<char>> storage(mine->size());
  std::map<std::string, BufferRef> refs;
  std::map<std::string, char*> host, dev;
  int64_t total = 0;
  for (size_t i = 0; i < mine->size(); ++i) {
    const LocalBuffer& lb = (*mine)[i];
    total += lb.byte_size;
    char* p = nullptr;
    if (gpu < 0) {
      storage[i].assign(lb.byte_size, 0);
      p = storage[i].data();
    }
#ifdef REFIT_DEMO_CUDA
    if (gpu >= 0) {
      absl::Status s = CudaStatus(cudaMalloc(reinterpret_cast<void**>(&p),
                                       std::max<int64_t>(lb.byte_size, 1)),
                            "cudaMalloc");
      if (s.ok()) s = CudaStatus(cudaMemset(p, 0, lb.byte_size), "cudaMemset");
      if (!s.ok()) return Fail(who, s);
      dev[lb.name] = p;
    }
#endif
    refs[lb.name] = {p, lb.byte_size};
  }
  // Host mirrors <-> device buffers (no-ops on host buffers); the mirrors
  // are made at the first use (GPU members that fill and check on the GPU
  // have none).
  auto sync_buffers = [&](bool to_device) -> absl::Status {
#ifdef REFIT_DEMO_CUDA
    if (host.empty()) {
      for (size_t i = 0; i < mine->size(); ++i) {
        if (!dev.count((*mine)[i].name)) continue;
        storage[i].assign((*mine)[i].byte_size, 0);
        host[(*mine)[i].name] = storage[i].data();
      }
    }
    for (const auto& [name, d] : dev) {
      const int64_t n = refs.at(name).byte_size;
      REFIT_RETURN_IF_ERROR(CudaStatus(
          to_device ? cudaMemcpy(d, host.at(name), n, cudaMemcpyHostToDevice)
                    : cudaMemcpy(host.at(name), d, n, cudaMemcpyDeviceToHost),
          "cudaMemcpy"));
    }
#endif
    (void)to_device;
    return absl::OkStatus();
  };

  DataPlaneOptions dpo;
#ifdef REFIT_DEMO_CUDA
  if (gpu >= 0) {
    dpo = fl.Get("transport") == "pull"
              ? PullDataPlaneOptions(gpu, nullptr, !trainer && fl.f.count("staged") > 0)
              : NcclDataPlaneOptions(gpu);
  }
#endif
  dpo.segment_checksums = fl.f.count("verify") > 0;
  dpo.staging.enabled = !trainer && fl.f.count("staged") > 0;
  auto joined = Member::Join(o, refs, dpo, absl::Now() + wait);
  if (!joined.ok()) return Fail(who, joined.status());
  Member& member = **joined;
  RefitClient& c = member.client();
  DataPlaneMember& m = member.data_plane();
  absl::Status prep = member.Prepare(absl::Now() + wait);
  if (!prep.ok()) return Fail(who, prep);
  std::printf("plan %s: %s global rank %d/%d, %zu buffers, %lld bytes\n",
              who.c_str(), m.fingerprint().c_str(), m.global_rank(),
              m.global_world(), mine->size(), static_cast<long long>(total));
  std::fflush(stdout);

  // Like a real trainer, the weights of version v are ready on every
  // trainer rank before rank 0 starts round v, and (demo only) every engine
  // rank has finished checking round v-1: a barrier through refitd's
  // key-value store, so a round's time is the data plane's alone.
  // GPU members fill and check the pattern on the GPU when every tensor of
  // theirs is a plain copy of the model's (no dtype change, no transform).
  auto device_pattern = [&](int64_t version, bool check) -> absl::StatusOr<bool> {
#ifdef REFIT_DEMO_CUDA
    if (gpu < 0) return false;
    REFIT_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(o.model));
    REFIT_ASSIGN_OR_RETURN(ModelTensors model, BuildModelTensors(config));
    std::map<std::string, DType> source;
    for (const TensorSpec& t : model.tensors) source[t.name] = t.dtype;
    const MappedSide& side = member.rank_layout();
    for (const TensorSpec& t : side.layout.tensors) {
      auto it = source.find(t.name);
      if (t.transform != Transform::kNone || it == source.end() || it->second != t.dtype) {
        return false;
      }
    }
    std::vector<char*> ptrs(side.layout.buffers.size(), nullptr);
    for (int32_t b = side.rank_begin[rank]; b < side.rank_begin[rank + 1]; ++b) {
      ptrs[b] = dev.at(side.layout.buffers[b].name);
    }
    REFIT_RETURN_IF_ERROR(AnnotateStatus(
        testing::DevicePattern(side.layout, rank, ptrs, static_cast<uint64_t>(version), check),
        who));
    return true;
#else
    (void)version;
    (void)check;
    return false;
#endif
  };
  const bool start = fl.f.count("start") > 0;
  const int64_t every = fl.Int("delta_every", 0);
  for (int64_t v = 1; v <= rounds; ++v) {
    if (trainer) {
      absl::StatusOr<bool> on_gpu = device_pattern(v, /*check=*/false);
      absl::Status s = on_gpu.status();
      if (s.ok() && !*on_gpu) {
        s = sync_buffers(/*to_device=*/false);  // makes the host mirrors
        if (s.ok()) s = testing::FillMemberDelta(member, 1, v, v > 1 ? every : 0, host);
        if (s.ok()) s = sync_buffers(/*to_device=*/true);
      }
      if (!s.ok()) return Fail(who, s);
    }
    const std::string key = absl::StrCat("demo/ready/", m.fingerprint(), "/", v);
    if (m.global_rank() != 0) {
      absl::Status s = c.KvSet(absl::StrCat(key, "/", m.global_rank()), "1",
                               absl::Now() + wait);
      if (!s.ok()) return Fail(who, s);
    } else {
      for (int32_t r = 1; r < m.global_world(); ++r) {
        auto s = c.KvGet(absl::StrCat(key, "/", r), absl::Now() + wait);
        if (!s.ok()) return Fail(who, s.status());
      }
    }
    if (start) {
      absl::Status s = member.StartRound(v, absl::Now() + wait);
      if (!s.ok()) return Fail(who, s);
    }
    absl::StatusOr<int64_t> got = c.WaitForRound(absl::Now() + wait);
    if (!got.ok()) return Fail(who, got.status());
    if (*got != v) {
      return Fail(who, absl::InternalError(absl::StrCat(
                           "refitd announced round ", *got, ", expected ", v)));
    }
#ifdef REFIT_DEMO_TEST_HOOKS
    if (!trainer && rank == 0) {
      absl::SleepFor(absl::Milliseconds(fl.Int("test_round_delay_ms", 0)));
    }
#endif
    absl::StatusOr<RunStats> st = m.RunRound(*got, absl::Now() + wait);
    if (!st.ok()) return Fail(absl::StrCat(who, " round ", *got), st.status());
    std::string check = "-";
    if (!trainer) {
      absl::StatusOr<bool> on_gpu = device_pattern(*got, /*check=*/true);
      absl::Status ok = on_gpu.status();
      if (ok.ok() && !*on_gpu) {
        ok = sync_buffers(/*to_device=*/false);
        if (ok.ok()) ok = testing::CheckMemberDelta(member, 1, *got, *got > 1 ? every : 0, host);
      }
      if (!ok.ok()) return Fail(absl::StrCat(who, " round ", *got, " check"), ok);
      check = on_gpu.ok() && *on_gpu ? "equal (checked on the GPU)" : "equal";
    }
    std::printf(
        "round %lld %s: sent %lld received %lld bytes in %.6f s, staging %lld, "
        "bytes %s%s\n",
        static_cast<long long>(*got), who.c_str(),
        static_cast<long long>(st->bytes_sent),
        static_cast<long long>(st->bytes_received), st->seconds,
        static_cast<long long>(st->peak_staging_bytes), check.c_str(),
        dpo.staging.enabled ? absl::StrFormat(", pause %.6f s", st->pause_seconds).c_str()
                            : "");
    std::fflush(stdout);
  }
  (void)c.Leave(absl::Now() + absl::Seconds(5));
  std::printf("ok %s\n", who.c_str());
  return 0;
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) {
  refit::Flags fl;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) continue;
    const size_t eq = a.find('=');
    fl.f[a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
        eq == std::string::npos ? "" : a.substr(eq + 1);
  }
  return refit::Main(fl);
}
