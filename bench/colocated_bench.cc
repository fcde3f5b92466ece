// colocated_bench: colocated refit (trainer and engine on ONE GPU) measured
// against the floor and the usual alternatives, all from one run (built
// here, run on a GPU host from the bundle).
//
//   colocated_bench [--cases=8b,tp2,moe] [--iters=5] [--moe_model=qwen3-30b-a3b]
//                   (or a config.json: the bundle has qwen3-30b-a3b-12-layers.json,
//                   Qwen3-30B-A3B's first 12 layers, 15.6 GB)
//
// Cases (engine vLLM TP1 on GPU 0 in every case):
//   8b   qwen3-8b, Megatron TP1 -> vLLM TP1
//   tp2  qwen3-8b, Megatron TP2 (two trainer processes) -> vLLM TP1
//   moe  --moe_model, Megatron TP1 with one buffer per expert
//        (experts=indexed) -> vLLM's fused w13 / w2
//   8b-fp8, 8b-mx, 8b-nv  qwen3-8b, Megatron TP1 (BF16) -> vLLM TP1
//        quant=fp8 (128 x 128 blocks, f32 scales) / quant=mxfp8 (1 x 32,
//        E8M0) / quant=nvfp4 (packed E2M1, e4m3 per 1 x 16, f32 global
//        scale per parameter: the trainer's global amax pass runs before
//        either path)
// Rows per case, times in ms per refit (mean over --iters after a warm-up):
//   floor       one cudaMemcpy device-to-device of the refit's bytes
//   pull-procs  refit's pull path (exec/pull/cuda/pull_runner.h), trainer and
//               engine as separate processes (the time per round: from the
//               last trainer's "weights in place" until every receiver is
//               done; the engine's kernel time is printed next to it)
//   pull-vmm    (8b) pull-procs with the trainer's memory in 20 MiB cuMem
//               chunks of one range, as PyTorch's expandable_segments
//   pull-thrds  the same with every member a thread of one process
//   per-tensor  one strided-copy kernel per HF tensor from contiguous HF
//               tensors into the engine's fused parameters (what an
//               in-process weight loader does), one process
//   bucketed    1 GiB buckets: per bucket, the HF tensors are packed into
//               the bucket, then copied out per tensor into the engine's
//               parameters, with a stream synchronization per bucket (the
//               handshake of a bucketed CUDA IPC refit), one process: a
//               lower bound of that path (no IPC handshake costs)
// Rows of 8b-fp8, 8b-mx and 8b-nv, ms per refit, next to the BF16 round:
//   bf16-round  the 8b case's pull-procs (BF16 -> BF16, same trainer)
//   2-pass      pull-procs where the trainer quantizes into scratch first
//               and the engine pulls the scratch
//   1-pass      pull-procs quantizing on pull (exec/pull/fused_pull.h): the
//               engine reads the trainer's BF16 and writes codes and
//               scales in one pass
//   checks: the engine's bytes after 1-pass equal 2-pass's (checksum of
//   every byte; tests hold both to the reference quantizer), every round
//   (the engine's buffers are poisoned before each).
// Checks: the pattern written into every trainer buffer is checked byte
// for byte in every engine buffer after round 1, both on the GPU
// (testing/gpu_pattern.h; the baselines check the GPU's pattern against
// the host's definition on the first 64 records and see the check fail on
// a flipped byte); every later round the trainers XOR their weights with a
// new key and the engine compares a position-dependent checksum of every
// byte with round 1's.
// Engine buffers are allocated once; their addresses never change. The
// last lines are one table. Exit 1 if any check fails.
// Parts: colocated_common.h (cases, arenas, patterns), colocated_baselines.h
// (floor, per-tensor, bucketed), colocated_spawn.h (worker processes).
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "exec/pull/cuda/pull_runner.h"
#include "exec/pull/cuda/pull_kernels.h"
#include "plan/plan_codec.h"
#include "testing/dir_kv_store.h"
#include "testing/flags.h"
#include "bench/colocated_baselines.h"
#include "bench/colocated_common.h"
#include "bench/colocated_spawn.h"

namespace refit::bench {
namespace {

// Waits until every one of `n` members wrote its mark for `round`.
absl::Status Barrier(KvStore* kv, const std::string& tag, int me, int n) {
  REFIT_RETURN_IF_ERROR(kv->Set(absl::StrCat(tag, "/", me), "1"));
  for (int i = 0; i < n; ++i) {
    REFIT_RETURN_IF_ERROR(kv->Get(absl::StrCat(tag, "/", i), absl::Seconds(120)).status());
  }
  return absl::OkStatus();
}

// One member of the pull path (a process or a thread): global rank g of a
// case with c.trainers trainers and one engine. Returns its result.
absl::StatusOr<std::map<std::string, std::string>> PullMember(const Case& c, const Plan& plan,
                                                             int g, const std::string& dir,
                                                             int iters, const std::string& ref_sum,
                                                             bool vmm = false,
                                                             bool two_pass = false) {
  CK(cudaSetDevice(0));
  const bool trainer = g < c.trainers;
  const Side side = trainer ? Side::kTrainer : Side::kEngine;
  const int rank = trainer ? g : g - c.trainers;
  const SideLayout& full = trainer ? plan.src : plan.dst;
  REFIT_ASSIGN_OR_RETURN(Arena a, Allocate(full, rank, trainer ? 0 : 0xEE, trainer && vmm));
  const bool quantized = absl::StrContains(c.engine, "quant=");
  if (trainer && quantized) {
    // The BF16 weights the conversions read (plan.src's records of them
    // are the converted ones).
    REFIT_ASSIGN_OR_RETURN(SideLayout registered, CaseTrainerLayout(c));
    REFIT_RETURN_IF_ERROR(Pattern(registered, rank, a, 1, false));
  } else if (trainer) {
    REFIT_RETURN_IF_ERROR(Pattern(full, rank, a, 1, false));
  }
  CK(cudaDeviceSynchronize());
  Plan slice = ExtractSlice(plan, side, rank);
  if (two_pass) {
    // The 2-pass row: the plan's one-pass conversions as two-pass ones
    // (the trainer quantizes into scratch, the engine pulls it).
    for (Conversion& c : slice.conversions) {
      c.one_pass = false;
      c.one_pass_cell_rows = c.one_pass_cell_cols = 0;
    }
  }
  testing::DirKvStore kv(dir);
  PullRunnerOptions po;
  po.device = 0;
  // Quantized engines: the trainer's weights stay; the engine's buffers
  // are poisoned before every round and must come back equal.
  const absl::Time prep0 = absl::Now();
  REFIT_ASSIGN_OR_RETURN(
      std::unique_ptr<PullRunner> e,
      PullRunner::Create(slice, side, rank,
                         SlicePointers(full, trainer ? slice.src : slice.dst, rank, a),
                         &kv, po, absl::Now() + absl::Seconds(120)));
  const double prep_s = absl::ToDoubleSeconds(absl::Now() - prep0);
  const std::vector<char*> before = a.Pointers();
  double kernel = 0;
  std::vector<std::string> starts, ends;  // wall clock (ns) per timed round
  unsigned long long sum1 = 0;
  std::string check = "PASS";
  const int world = c.trainers + 1;
  for (int round = 1; round <= iters + 1; ++round) {
    if (quantized && !trainer) {
      CK(cudaMemset(a.base, 0xEE, a.bytes));
      CK(cudaDeviceSynchronize());
    }
    if (trainer && round > 1 && !quantized) {
      CK(static_cast<cudaError_t>(cuda::LaunchXorBytes(
          a.base, a.bytes, static_cast<uint8_t>(Key(round) ^ Key(round - 1)), nullptr)));
      CK(cudaDeviceSynchronize());
    }
    REFIT_RETURN_IF_ERROR(Barrier(&kv, absl::StrCat("barrier", round), g, world));
    if (trainer) absl::SleepFor(absl::Milliseconds(20));  // the engine waits first
    const absl::Time t0 = absl::Now();
    REFIT_ASSIGN_OR_RETURN(RunStats s, e->Run(absl::Now() + absl::Seconds(60)));
    const absl::Time t1 = absl::Now();
    if (round > 1) {
      starts.push_back(absl::StrCat(absl::ToUnixNanos(t0)));
      ends.push_back(absl::StrCat(absl::ToUnixNanos(t1)));
      kernel += s.device_seconds;
    }
    if (!trainer && quantized) {
      REFIT_ASSIGN_OR_RETURN(unsigned long long h, Checksum(full, rank, a, 0));
      if (round == 1) sum1 = h;
      if (h != sum1 && check == "PASS") check = absl::StrCat("FAIL round ", round, ": checksum");
    } else if (!trainer) {
      if (round == 1) {
        REFIT_ASSIGN_OR_RETURN(sum1, Checksum(full, rank, a, 0));
        if (ref_sum.empty()) {  // no host-checked reference: check here
          absl::Status ok = Pattern(full, rank, a, 1, true);
          if (!ok.ok()) check = absl::StrCat("FAIL round 1: ", ok.message());
        } else if (absl::StrCat(sum1) != ref_sum) {
          check = "FAIL round 1: engine checksum differs from the host-checked copy";
        }
      } else {
        REFIT_ASSIGN_OR_RETURN(unsigned long long h, Checksum(full, rank, a, Key(round)));
        if (h != sum1 && check == "PASS") check = absl::StrCat("FAIL round ", round, ": checksum");
      }
    }
  }
  if (a.Pointers() != before) check = "FAIL: buffer addresses changed";
  std::map<std::string, std::string> r;
  // A refit's time is the trainers' (Merge): from "weights in place"
  // until every engine's copies are done. An engine's own Run also counts
  // its wait for the trainer (which starts 20 ms after it).
  if (trainer) {
    r["starts"] = absl::StrJoin(starts, ",");
    r["ends"] = absl::StrJoin(ends, ",");
  }
  r["kernel_ms"] = absl::StrCat(kernel / iters * 1e3);  // the engine's pull kernel
  r["check"] = check;
  r["prepare_s"] = absl::StrCat(prep_s);
  r["bytes"] = absl::StrCat(e->bytes());
  r["items"] = absl::StrCat(e->num_items());
  if (!trainer) r["sum1"] = absl::StrCat(sum1);
  if (!trainer) r["qitems"] = absl::StrCat(e->num_quantize_items());
  if (trainer) r["fused"] = absl::StrCat(e->num_fused_conversions());
  e.reset();
  if (!a.vmm) CK(cudaFree(a.base));
  return r;
}

// One result from the members' (the round time of the trainers, every
// member's check and error).
absl::StatusOr<std::map<std::string, std::string>> Merge(
    const std::vector<absl::StatusOr<std::map<std::string, std::string>>>& res) {
  std::map<std::string, std::string> out{{"ms", "0"}, {"check", "PASS"}};
  double kernel_ms = 0;
  for (const auto& r : res) {
    if (!r.ok()) return r.status();
    double v = 0;
    if (r->count("kernel_ms") && absl::SimpleAtod(r->at("kernel_ms"), &v)) {
      kernel_ms = std::max(kernel_ms, v);
    }
    if (r->count("items") && r->at("items") != "0") out["items"] = r->at("items");
    for (const char* k : {"sum1", "qitems", "fused"}) {
      if (r->count(k)) out[k] = r->at(k);
    }
    // Every member waits in Create for the last one to arrive (the others
    // may still be filling their buffers): the shortest is the cost.
    double p = 0, best = 0;
    if (r->count("prepare_s") && absl::SimpleAtod(r->at("prepare_s"), &p) &&
        (!out.count("prepare_s") || (absl::SimpleAtod(out["prepare_s"], &best) && p < best))) {
      out["prepare_s"] = r->at("prepare_s");
    }
    if (r->at("check") != "PASS") out["check"] = r->at("check");
  }
  out["kernel_ms"] = absl::StrCat(kernel_ms);
  // A round lasts from the last trainer's "in place" to the last trainer's
  // "every receiver done" (members share the host's clock); a trainer that
  // starts early would otherwise count its wait for the others.
  std::vector<int64_t> start, end;
  for (const auto& r : res) {
    if (!r->count("starts")) continue;
    std::vector<std::string> a = absl::StrSplit(r->at("starts"), ',', absl::SkipEmpty());
    std::vector<std::string> b = absl::StrSplit(r->at("ends"), ',', absl::SkipEmpty());
    start.resize(std::max(start.size(), a.size()), 0);
    end.resize(std::max(end.size(), b.size()), 0);
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      int64_t x = 0, y = 0;
      if (absl::SimpleAtoi(a[i], &x)) start[i] = std::max(start[i], x);
      if (absl::SimpleAtoi(b[i], &y)) end[i] = std::max(end[i], y);
    }
  }
  if (!start.empty() && start.size() == end.size()) {
    double sum = 0;
    for (size_t i = 0; i < start.size(); ++i) sum += (end[i] - start[i]) / 1e6;
    out["ms"] = absl::StrCat(sum / start.size());
    // Kept, so that a merged result merges again to the same time (the
    // threads row: its worker merges its threads, the parent merges the
    // worker's result).
    out["starts"] = absl::StrJoin(start, ",");
    out["ends"] = absl::StrJoin(end, ",");
  }
  return out;
}

// The pull path with every member a thread of this process.
absl::StatusOr<std::map<std::string, std::string>> PullThreads(const Case& c, const Plan& plan,
                                                              const std::string& dir, int iters,
                                                              const std::string& ref_sum) {
  const int world = c.trainers + 1;
  std::vector<absl::StatusOr<std::map<std::string, std::string>>> res(
      world, absl::UnknownError("not run"));
  std::vector<std::thread> th;
  for (int g = 0; g < world; ++g) {
    th.emplace_back([&, g] { res[g] = PullMember(c, plan, g, dir, iters, ref_sum); });
  }
  for (auto& t : th) t.join();
  return Merge(res);
}

// --worker MODE CASE INDEX DIR (MODE: baselines, threads, member).
int Worker(int argc, char** argv) {
  if (argc < 6) return 2;
  const std::string mode = argv[2], case_name = argv[3], dir = argv[5];
  const int index = std::atoi(argv[4]);
  const int iters = std::atoi(testing::FlagValue(argc, argv, "iters", "5").c_str());
  absl::StatusOr<std::map<std::string, std::string>> r = [&]()
      -> absl::StatusOr<std::map<std::string, std::string>> {
    REFIT_ASSIGN_OR_RETURN(
        Case c, CaseNamed(case_name, testing::FlagValue(argc, argv, "moe_model", "qwen3-30b-a3b")));
    if (mode == "baselines") return Baselines(c, iters);
    REFIT_ASSIGN_OR_RETURN(Plan plan, CasePlan(c, false));
    const std::string ref = testing::FlagValue(argc, argv, "ref_sum", "");
    if (mode == "threads") return PullThreads(c, plan, dir + "/kv", iters, ref);
    if (mode == "member-vmm") return PullMember(c, plan, index, dir + "/kv", iters, ref, true);
    if (mode == "member-2pass") {
      return PullMember(c, plan, index, dir + "/kv", iters, ref, false, true);
    }
    return PullMember(c, plan, index, dir + "/kv", iters, ref);
  }();
  const std::string out = absl::StrCat(dir, "/result.", index);
  if (!r.ok()) {
    WriteResult(out, {{"error", std::string(r.status().ToString())}});
    return 1;
  }
  WriteResult(out, *r);
  return 0;
}

double D(const std::map<std::string, std::string>& m, const std::string& k) {
  double v = 0;
  auto it = m.find(k);
  if (it != m.end()) (void)absl::SimpleAtod(it->second, &v);
  return v;
}

int Main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--worker") return Worker(argc, argv);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
    std::printf("SKIP: no CUDA device\nREFIT_GPU_SKIP\n");
    return 0;
  }
  cudaDeviceProp prop;
  (void)cudaGetDeviceProperties(&prop, 0);
  std::printf("GPU 0: %s, %.1f GiB\n", prop.name, prop.totalGlobalMem / double(1 << 30));
  // The parent uses no more CUDA: workers are forked.
  const std::string cases = testing::FlagValue(argc, argv, "cases", "8b,tp2,moe");
  std::vector<std::string> flags;
  for (int i = 1; i < argc; ++i) flags.push_back(argv[i]);
  bool ok = true;
  std::vector<std::string> table;
  for (absl::string_view cn : absl::StrSplit(cases, ',')) {
    const std::string name(cn);
    absl::StatusOr<Case> c =
        CaseNamed(name, testing::FlagValue(argc, argv, "moe_model", "qwen3-30b-a3b"));
    if (!c.ok()) {
      std::printf("%s\n", c.status().ToString().c_str());
      return 2;
    }
    std::vector<std::string> case_flags = flags;
    auto run = [&](const std::string& mode, int n, const std::string& case_name = "")
        -> absl::StatusOr<std::vector<std::map<std::string, std::string>>> {
      char tmpl[] = "/tmp/colocated_bench.XXXXXX";
      const std::string dir = mkdtemp(tmpl);
      (void)system(absl::StrCat("mkdir -p ", dir, "/kv").c_str());
      std::vector<std::string> args = {mode, case_name.empty() ? name : case_name};
      absl::StatusOr<std::vector<std::map<std::string, std::string>>> r =
          Spawn(argv[0], args, n, dir, case_flags);
      (void)system(absl::StrCat("rm -rf ", dir).c_str());
      return r;
    };
    std::printf("== %s: %s, %s -> %s\n", name.c_str(), c->model.c_str(), c->trainer.c_str(),
                c->engine.c_str());
    std::fflush(stdout);
    if (absl::StrContains(c->engine, "quant=")) {
      // The BF16 round of the same trainer, then the two quantized rounds.
      double bf16 = 0;
      std::string sum2;
      for (const auto& [what, mode, case_name] :
           std::vector<std::tuple<std::string, std::string, std::string>>{
               {"bf16-round", "member", "8b"},
               {"2-pass", "member-2pass", name},
               {"1-pass", "member", name}}) {
        auto res = run(mode, 2, case_name);
        absl::StatusOr<std::map<std::string, std::string>> m =
            res.ok() ? Merge({res->begin(), res->end()})
                     : absl::StatusOr<std::map<std::string, std::string>>(res.status());
        if (!m.ok()) {
          std::printf("%s %s: %s\n", name.c_str(), what.c_str(), m.status().ToString().c_str());
          ok = false;
          continue;
        }
        std::string check = m->at("check");
        if (what == "bf16-round") bf16 = D(*m, "ms");
        if (what == "2-pass") sum2 = m->count("sum1") ? m->at("sum1") : "";
        if (what == "1-pass" && check == "PASS") {
          if (!m->count("sum1") || m->at("sum1") != sum2) {
            check = "FAIL: engine bytes differ from the 2-pass round";
          } else if (D(*m, "qitems") <= 0) {
            check = "FAIL: nothing was quantized on pull";
          }
        }
        table.push_back(absl::StrFormat(
            "%-6s %-10s %9.2f ms %6.3fx  %-5s %s", name, what, D(*m, "ms"),
            bf16 > 0 ? D(*m, "ms") / bf16 : 0, check.substr(0, 5),
            absl::StrFormat("x the bf16 round; kernel %.2f ms, %s copy items, %s quantize "
                            "items, %s conversions fused",
                            D(*m, "kernel_ms"), m->count("items") ? m->at("items") : "0",
                            m->count("qitems") ? m->at("qitems") : "0",
                            m->count("fused") ? m->at("fused") : "0")));
        std::printf("%s\n", table.back().c_str());
        std::fflush(stdout);
        if (check != "PASS") {
          ok = false;
          std::printf("%s %s: %s\n", name.c_str(), what.c_str(), check.c_str());
        }
      }
      continue;
    }
    auto base = run("baselines", 1);
    if (!base.ok()) {
      std::printf("%s baselines: %s\n", name.c_str(), base.status().ToString().c_str());
      ok = false;
      continue;
    }
    const auto& b = (*base)[0];
    case_flags.push_back(absl::StrCat("--ref_sum=", b.at("ref_sum")));
    const double floor = D(b, "floor_ms");
    auto row = [&](const std::string& what, double ms, const std::string& check,
                   const std::string& extra) {
      table.push_back(absl::StrFormat("%-4s %-11s %9.2f ms %6.3fx  %-5s %s", name, what, ms,
                                      floor > 0 ? ms / floor : 0, check.substr(0, 5), extra));
      std::printf("%s\n", table.back().c_str());
      std::fflush(stdout);
      if (check != "PASS" && check != "-") {
        ok = false;
        std::printf("%s %s: %s\n", name.c_str(), what.c_str(), check.c_str());
      }
    };
    row("floor", floor, "-",
        absl::StrFormat("%.2f GB, %.0f GB/s", D(b, "bytes") / 1e9,
                        D(b, "bytes") / 1e9 / (floor / 1e3)));
    row("per-tensor", D(b, "per_tensor_ms"), b.at("per_tensor_check"),
        "one copy kernel per HF tensor, in process (engine bytes host-checked)");
    row("bucketed", D(b, "bucketed_ms"), b.at("bucketed_check"),
        "1 GiB buckets, pack + copy out, in process");
    auto pull_row = [&](const std::string& what, const std::string& mode, int n,
                        const std::string& extra) {
      auto res = run(mode, n);
      if (!res.ok()) {
        std::printf("%s %s: %s\n", name.c_str(), what.c_str(), res.status().ToString().c_str());
        ok = false;
        return;
      }
      absl::StatusOr<std::map<std::string, std::string>> m = Merge({res->begin(), res->end()});
      if (!m.ok()) {
        std::printf("%s %s: %s\n", name.c_str(), what.c_str(), m.status().ToString().c_str());
        ok = false;
        return;
      }
      row(what, D(*m, "ms"), m->at("check"),
          absl::StrFormat("%s, %s work items, kernel %.2f ms, prepare %.2f s", extra,
                          m->count("items") ? m->at("items") : "?", D(*m, "kernel_ms"),
                          D(*m, "prepare_s")));
    };
    pull_row("pull-procs", "member", c->trainers + 1,
             absl::StrCat(c->trainers + 1, " processes"));
    if (name == "8b") {
      pull_row("pull-vmm", "member-vmm", 2,
               "2 processes, trainer memory in 20 MiB cuMem chunks (expandable_segments)");
    }
    if (name != "moe") {
      pull_row("pull-thrds", "threads", 1, absl::StrCat(c->trainers + 1, " threads of one process"));
    }
  }
  std::printf("\ncase what             time   vs floor check details\n");
  for (const std::string& l : table) std::printf("%s\n", l.c_str());
  std::printf("%s\n", ok ? "ALL PASS" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace refit::bench

int main(int argc, char** argv) { return refit::bench::Main(argc, argv); }
