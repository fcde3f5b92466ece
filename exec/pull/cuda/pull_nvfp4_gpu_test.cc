// GPU check of NVFP4 quantize-on-pull (exec/pull/fused_pull.h, the kernel of
// pull_nvfp4_kernels.h through pull_nvfp4_items.h): for planner cases
// (Megatron TP and EP, FSDP's row chunks, FlashInfer's swizzled scales),
// the trainers compute and exchange their global amaxes (the host
// Converter's global-amax-only conversions, as the pull runner's senders
// do on the GPU) and every engine rank's items run on the GPU leave its
// buffers bit-equal to the host run of the same items (which
// tests/dataplane:fused_pull_test holds to the reference quantizer). Then
// the throughput on a 16384 x 16384 BF16 weight: one pass next to a device
// copy of the BF16 bytes and next to the two passes it replaces (quantize
// into scratch, copy the scratch), bytes equal; a NaN is named by its
// item. Prints PASS/FAIL and FIGURE lines; SKIP and REFIT_GPU_SKIP without
// a device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "exec/convert/convert.h"
#include "exec/pull/cuda/fused_pull_device.h"
#include "exec/pull/cuda/fused_pull_items.h"
#include "exec/convert/cuda/nvfp4_kernels.h"
#include "exec/pull/cuda/pull_nvfp4_items.h"
#include "exec/pull/cuda/pull_nvfp4_kernels.h"
#include "exec/convert/cuda/pull_quantize_kernels.h"
#include "exec/pull/fused_pull.h"
#include "exec/pull/pull_program.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "plan/conversion.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"
#include "testing/gpu_test.h"
#include "testing/planned_case.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

using testing::DeviceCopies;
using testing::FromDevice;

// A trainer rank on host memory: its slice, fused conversions, and buffers
// (registered ones by name, scratch of the conversions it keeps).
struct Trainer {
  Plan slice, kept;
  std::set<int32_t> fused;
  std::set<int32_t> global;  // kept.conversions that only compute global amaxes
  std::vector<char*> buffers;  // like kept.src.buffers
  std::list<std::vector<char>> scratch;  // stable addresses
};

// A trainer layout's buffers on the host, filled with the test pattern.
OwnedBuffers PatternedSource(const SideLayout& layout) {
  const std::map<std::string, DType> source = SourceDTypes(layout);
  PatternOptions po{-1, 5};
  po.source_dtypes = &source;
  OwnedBuffers s = AllocateBuffers(layout);
  FillPattern(layout, s.ptrs, po);
  return s;
}

// Trainer rank t of `plan` over the registered buffers `s` (of `layout`)
// and zeroed scratch.
void SetUpTrainer(const Plan& plan, int32_t t, const SideLayout& layout, const OwnedBuffers& s,
                  Trainer* x) {
  x->slice = *FromProto(ToProto(ExtractSlice(plan, Side::kTrainer, t)));
  x->fused = FusableConversions(x->slice, t, {});
  KeptConversions kept = WithoutConversions(x->slice, x->fused);
  x->kept = std::move(kept.plan);
  x->global = std::move(kept.global_amax);
  x->buffers.assign(x->kept.src.buffers.size(), nullptr);
  for (size_t b = 0; b < x->kept.src.buffers.size(); ++b) {
    const BufferSpec& spec = x->kept.src.buffers[b];
    if (spec.rank != t) continue;
    if (spec.scratch) {
      x->scratch.emplace_back(spec.byte_size, 0);
      x->buffers[b] = x->scratch.back().data();
      continue;
    }
    for (size_t k = 0; k < layout.buffers.size(); ++k) {
      if (layout.buffers[k].rank == t && layout.buffers[k].name == spec.name) {
        x->buffers[b] = reinterpret_cast<char*>(s.ptrs[k]);
      }
    }
  }
}

// Runs `items` on the GPU as the pull runner does (NVFP4's kernel, the
// FP8 / MXFP8 one for the rest); returns whether a kernel flagged an item.
bool RunOnGpu(const std::vector<FusedItem>& items, const std::map<int32_t, std::vector<char*>>& src,
              const std::vector<char*>& dst, int64_t* nv_count) {
  std::vector<FusedItem> nv, others;
  for (const FusedItem& it : items) (IsNvfp4Item(it) ? nv : others).push_back(it);
  *nv_count = static_cast<int64_t>(nv.size());
  auto a = ResolveNvfp4Items(nv, src, dst);
  auto b = ResolveFusedItems(others, src, dst);
  EXPECT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  if (!a.ok() || !b.ok()) return true;
  DeviceCopies d;
  const long long none[2] = {LLONG_MAX, LLONG_MAX};
  char* bad = d.Add(none, 16);
  char* da = d.Add(a->data(), static_cast<int64_t>(a->size() * sizeof(cuda::PullNvfp4Item)));
  char* db = d.Add(b->data(), static_cast<int64_t>(b->size() * sizeof(cuda::PullQuantItem)));
  EXPECT_EQ(cuda::LaunchPullQuantize(reinterpret_cast<const cuda::PullQuantItem*>(db),
                                     static_cast<int64_t>(b->size()),
                                     reinterpret_cast<long long*>(bad), nullptr),
            0);
  EXPECT_EQ(cuda::LaunchPullNvfp4(reinterpret_cast<const cuda::PullNvfp4Item*>(da),
                                  static_cast<int64_t>(a->size()),
                                  reinterpret_cast<long long*>(bad) + 1, nullptr),
            0);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<long long> flags = FromDevice<long long>(bad, 2);
  return flags[0] != LLONG_MAX || flags[1] != LLONG_MAX;
}

TEST(PullNvfp4GpuTest, KernelEqualsHostItemsOnPlannerCases) {
  REFIT_SKIP_WITHOUT_GPU("pull_nvfp4_gpu_test");
  struct Case {
    const char* model;
    const char* trainer;
    const char* engine;
  };
  const Case cases[] = {
      {"tiny-qwen3-fp4", "megatron:tp=2", "vllm:tp=1,quant=nvfp4"},
      {"tiny-qwen3-fp4", "fsdp:dp=3", "vllm:tp=1,dp=2,quant=nvfp4"},
      {"tiny-qwen3-fp4", "megatron:tp=4,dp=2", "vllm:tp=2,dp=2,quant=nvfp4"},
      {"tiny-qwen3-moe-fp4", "megatron:tp=2,ep=2,etp=1", "vllm:tp=2,quant=nvfp4"},
      {"tiny-qwen3-fp4-fi", "megatron:tp=2", "vllm:tp=1,quant=nvfp4,kernel=flashinfer"},
      // Scales padded to whole tiles, weights to 32 rows and codes.
      {"tiny-qwen3-fp4", "megatron:tp=2", "vllm:tp=1,quant=nvfp4,kernel=flashinfer"}};
  for (const Case& c : cases) {
    testing::PlannedCase pc;
    const absl::Status planned = testing::PlanCase(c.model, c.trainer, c.engine, &pc);
    ASSERT_TRUE(planned.ok()) << planned;
    auto& [model, src, dst, plan] = pc;
    OwnedBuffers s = PatternedSource(src->layout);
    const int32_t ws = plan->src.world_size;
    // The trainers: what they keep, their global amaxes exchanged.
    std::vector<Trainer> tr(ws);
    std::vector<Converter> conv;
    std::vector<std::map<int32_t, std::vector<float>>> sent(ws);
    auto ops = MakeHostConvertOps();
    for (int32_t t = 0; t < ws; ++t) {
      Trainer& x = tr[t];
      SetUpTrainer(*plan, t, src->layout, s, &x);
      auto cv = Converter::Create(x.kept, t, x.global);
      ASSERT_TRUE(cv.ok()) << cv.status();
      auto p = cv->Partials(*ops, x.buffers);
      ASSERT_TRUE(p.ok()) << p.status();
      sent[t] = *p;
      conv.push_back(*std::move(cv));
    }
    for (int32_t t = 0; t < ws; ++t) {
      std::map<int32_t, std::vector<float>> received;
      for (const auto& [peer, count] : conv[t].peers()) received[peer] = sent[peer].at(t);
      ASSERT_TRUE(conv[t].Finish(*ops, tr[t].buffers, received).ok());
    }
    int64_t items_run = 0, nv_run = 0, differ = 0, differ_tables = 0;
    for (int32_t e = 0; e < plan->dst.world_size; ++e) {
      const Plan slice = *FromProto(ToProto(ExtractSlice(*plan, Side::kEngine, e)));
      const PullProgram program = *BuildPullProgram(slice, e);
      DeviceCopies dev;
      std::map<int32_t, std::vector<const char*>> host_src;
      std::map<int32_t, std::vector<char*>> dev_src;
      std::map<int32_t, std::vector<FusedSource>> sources;
      for (const PullPeer& peer : program.peers) {
        const int32_t t = peer.src_rank;
        const std::vector<int32_t> exported =
            ExportedSourceBuffers(tr[t].slice, t, e, tr[t].fused);
        host_src[t].assign(slice.src.buffers.size(), nullptr);
        dev_src[t].assign(slice.src.buffers.size(), nullptr);
        for (size_t p = 0; p < exported.size(); ++p) {
          const char* h = tr[t].buffers[exported[p]];
          if (h == nullptr) continue;
          host_src[t][peer.buffers[p]] = h;
          dev_src[t][peer.buffers[p]] = dev.Add(h, tr[t].kept.src.buffers[exported[p]].byte_size);
        }
        sources[t] = FusedSourcesOf(tr[t].slice, t, e, tr[t].fused);
      }
      auto fp = BuildFusedItems(slice, e, sources);
      ASSERT_TRUE(fp.ok()) << fp.status();
      std::vector<std::vector<char>> host_dst;
      std::vector<char*> hd, dd;
      for (const BufferSpec& b : slice.dst.buffers) {
        host_dst.emplace_back(b.rank == e ? b.byte_size : 0, 0);
        hd.push_back(host_dst.back().data());
        dd.push_back(b.rank == e ? dev.Add(nullptr, b.byte_size) : nullptr);
      }
      ASSERT_TRUE(RunFusedItemsHost(fp->items, slice, host_src, hd).ok());
      int64_t nv = 0;
      EXPECT_FALSE(RunOnGpu(fp->items, dev_src, dd, &nv)) << "no non-finite values";
      items_run += static_cast<int64_t>(fp->items.size());
      nv_run += nv;
      auto count_differ = [&](int64_t* n) {
        for (size_t b = 0; b < host_dst.size(); ++b) {
          const std::vector<char> got = FromDevice<char>(dd[b], host_dst[b].size());
          for (size_t i = 0; i < got.size(); ++i) *n += got[i] != host_dst[b][i];
          if (dd[b] != nullptr) cudaMemset(dd[b], 0, host_dst[b].size());
        }
      };
      count_differ(&differ);
      // The pull runner's device items (NVFP4 by threshold tables).
      auto device = FusedPullDevice::Create(slice, *fp, dev_src, dd);
      ASSERT_TRUE(device.ok()) << device.status();
      ASSERT_TRUE((*device)->Launch(nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_TRUE((*device)->Check(e).ok());
      count_differ(&differ_tables);
    }
    EXPECT_GT(nv_run, 0) << c.engine;
    EXPECT_EQ(differ, 0) << c.model << " " << c.trainer << " -> " << c.engine;
    EXPECT_EQ(differ_tables, 0) << c.model << " " << c.trainer << " -> " << c.engine;
    std::printf("%s nvfp4 quantize-on-pull %s %s -> %s: %lld items (%lld NVFP4), %lld bytes "
                "differ from the host by arithmetic, %lld through FusedPullDevice's threshold "
                "tables\n",
                HasFailure() ? "FAIL" : "PASS", c.model, c.trainer, c.engine,
                static_cast<long long>(items_run), static_cast<long long>(nv_run),
                static_cast<long long>(differ), static_cast<long long>(differ_tables));
  }
}

// One trainer holding whole parameters (Megatron TP1 -> vLLM TP1): the
// engine computes the global amaxes in its pass (EngineAmaxConversions;
// the trainer reads nothing). Round 1 starts from no amax, round 2 keeps
// them, round 3 follows a weight whose amax grew: every round the engine's
// bytes, the trainer scratch's amaxes and global scales equal the host's
// two-pass run, and only round 1 and the changed parameter run twice.
TEST(PullNvfp4GpuTest, EngineComputedAmaxesEqualTheTrainers) {
  REFIT_SKIP_WITHOUT_GPU("pull_nvfp4_gpu_test");
  testing::PlannedCase pc;
  ASSERT_TRUE(testing::PlanCase("tiny-qwen3-fp4", "megatron:tp=1", "vllm:tp=1,quant=nvfp4", &pc)
                  .ok());
  auto& [model, src, dst, plan] = pc;
  OwnedBuffers s = PatternedSource(src->layout);
  Trainer x;
  SetUpTrainer(*plan, 0, src->layout, s, &x);
  const std::set<int32_t> engine = EngineAmaxConversions(x.slice, 0, x.fused);
  ASSERT_FALSE(engine.empty());
  auto ops = MakeHostConvertOps();
  auto cv = Converter::Create(x.kept, 0, x.global);
  ASSERT_TRUE(cv.ok()) << cv.status();
  const Plan slice = *FromProto(ToProto(ExtractSlice(*plan, Side::kEngine, 0)));
  const PullProgram program = *BuildPullProgram(slice, 0);
  ASSERT_EQ(program.peers.size(), 1u);
  const std::vector<int32_t> exported = ExportedSourceBuffers(x.slice, 0, 0, x.fused);
  DeviceCopies dev;
  std::map<int32_t, std::vector<const char*>> host_src{{0, {}}};
  std::map<int32_t, std::vector<char*>> dev_src{{0, {}}};
  host_src[0].assign(slice.src.buffers.size(), nullptr);
  dev_src[0].assign(slice.src.buffers.size(), nullptr);
  std::vector<std::pair<char*, const char*>> mirror;  // device copy, host buffer
  std::vector<int64_t> mirror_bytes;
  for (size_t p = 0; p < exported.size(); ++p) {
    const char* h = x.buffers[exported[p]];
    if (h == nullptr) continue;
    const int64_t bytes = x.kept.src.buffers[exported[p]].byte_size;
    host_src[0][program.peers[0].buffers[p]] = h;
    // The scratch (amaxes, global scales) poisoned: the engine writes it.
    const bool scratch = x.kept.src.buffers[exported[p]].scratch;
    char* d = dev.Add(scratch ? nullptr : h, bytes);
    if (scratch) cudaMemset(d, 0xA5, bytes);
    dev_src[0][program.peers[0].buffers[p]] = d;
    mirror.emplace_back(d, h);
    mirror_bytes.push_back(scratch ? bytes : 0);  // scratch compared after each round
  }
  const std::map<int32_t, std::vector<FusedSource>> sources{
      {0, FusedSourcesOf(x.slice, 0, 0, x.fused)}};
  auto fp = BuildFusedItems(slice, 0, sources);
  ASSERT_TRUE(fp.ok()) << fp.status();
  std::vector<std::vector<char>> host_dst;
  std::vector<char*> hd, dd;
  for (const BufferSpec& b : slice.dst.buffers) {
    host_dst.emplace_back(b.rank == 0 ? b.byte_size : 0, 0);
    hd.push_back(host_dst.back().data());
    dd.push_back(b.rank == 0 ? dev.Add(nullptr, b.byte_size) : nullptr);
  }
  auto device = FusedPullDevice::Create(slice, *fp, dev_src, dd);
  ASSERT_TRUE(device.ok()) << device.status();
  // One computed amax per parameter (vLLM's q/k/v share one).
  const int64_t params = (*device)->num_engine_amaxes();
  EXPECT_GT(params, 0);
  EXPECT_LE(params, static_cast<int64_t>(engine.size()));
  for (int round = 1; round <= 3; ++round) {
    if (round == 3) {  // one weight element grows: its parameter's amax changes
      // An item of a parameter whose amax (the host's, of round 2) is below
      // BF16's largest finite value, 0x7F7F; that element becomes it.
      const FusedItem* grown = nullptr;
      for (const FusedItem& it : fp->items) {
        uint32_t bits = 0;
        std::memcpy(&bits, host_src[0][it.global_buffer] + it.global_offset, 4);
        if (bits < 0x7F7F0000u) {
          grown = &it;
          break;
        }
      }
      ASSERT_NE(grown, nullptr);
      const uint16_t big = 0x7F7F;
      const char* h = host_src[0][grown->src_buffer];
      std::memcpy(const_cast<char*>(h) + grown->src_offset, &big, 2);
      for (const auto& [d, host] : mirror) {  // every device copy of that buffer
        if (host == h) {
          ASSERT_EQ(cudaMemcpy(d + grown->src_offset, &big, 2, cudaMemcpyHostToDevice),
                    cudaSuccess);
        }
      }
    }
    for (size_t b = 0; b < dd.size(); ++b) {  // every engine byte poisoned
      std::fill(host_dst[b].begin(), host_dst[b].end(), static_cast<char>(0xEE));
      if (dd[b] != nullptr) cudaMemset(dd[b], 0xEE, host_dst[b].size());
    }
    // The host: the trainer's amaxes and scales, then the items.
    auto p = cv->Partials(*ops, x.buffers);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE(cv->Finish(*ops, x.buffers, {}).ok());
    ASSERT_TRUE(RunFusedItemsHost(fp->items, slice, host_src, hd).ok());
    ASSERT_TRUE((*device)->Launch(nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE((*device)->Check(0).ok());
    int64_t differ = 0, scratch_differ = 0;
    for (size_t b = 0; b < host_dst.size(); ++b) {
      const std::vector<char> got = FromDevice<char>(dd[b], host_dst[b].size());
      for (size_t i = 0; i < got.size(); ++i) differ += got[i] != host_dst[b][i];
    }
    for (size_t k = 0; k < mirror.size(); ++k) {
      if (mirror_bytes[k] == 0) continue;
      const std::vector<char> got = FromDevice<char>(mirror[k].first, mirror_bytes[k]);
      scratch_differ += std::memcmp(got.data(), mirror[k].second, got.size()) != 0;
    }
    const int64_t changed = (*device)->last_changed();
    EXPECT_EQ(differ, 0) << "round " << round;
    EXPECT_EQ(scratch_differ, 0) << "round " << round;
    EXPECT_EQ(changed, round == 1 ? params : round == 2 ? 0 : 1)
        << "round " << round;
    std::printf("%s nvfp4 engine-computed global amaxes, round %d: %lld of %lld parameters "
                "requantized, %lld engine bytes and %lld scratch buffers differ from the host\n",
                HasFailure() ? "FAIL" : "PASS", round, static_cast<long long>(changed),
                static_cast<long long>(params), static_cast<long long>(differ),
                static_cast<long long>(scratch_differ));
  }
}

TEST(PullNvfp4GpuTest, OnePassNextToACopyAndTwoPasses) {
  REFIT_SKIP_WITHOUT_GPU("pull_nvfp4_gpu_test");
  const int64_t rows = 16384, cols = 16384, n = rows * cols;
  DeviceCopies d;
  char* in = d.Add(nullptr, n * 2);
  char* copy = d.Add(nullptr, n * 2);
  char* out = d.Add(nullptr, n / 2);
  char* scales = d.Add(nullptr, n / 16);
  char* scratch = d.Add(nullptr, n / 2);
  char* scratch_scales = d.Add(nullptr, n / 16);
  const int64_t chunk = int64_t{1} << 24;
  const std::vector<uint16_t> w = testing::TrainedBf16(chunk, 3);
  for (int64_t at = 0; at < n; at += chunk) {
    ASSERT_EQ(cudaMemcpy(in + 2 * at, w.data(), 2 * chunk, cudaMemcpyHostToDevice), cudaSuccess);
  }
  const long long none = LLONG_MAX;
  long long* bad = reinterpret_cast<long long*>(d.Add(&none, 8));
  float* gamax = reinterpret_cast<float*>(d.Add(nullptr, 4));
  const cuda::DenseBox box{in, cuda::kConvertBF16, 1, rows, cols, 0, 0, 1, kNvfp4Block};
  // Items of 128 x 128 cells, codes and scales row-major.
  std::vector<cuda::PullNvfp4Item> items;
  for (int64_t i = 0; i < rows; i += 128) {
    for (int64_t j = 0; j < cols; j += 128) {
      cuda::PullNvfp4Item it{};
      it.src = in + 2 * (i * cols + j);
      it.dst = reinterpret_cast<unsigned char*>(out) + (i * cols + j) / 2;
      it.scales = reinterpret_cast<unsigned char*>(scales) + i * (cols / 16) + j / 16;
      it.global_amax = gamax;
      it.src_pitch = cols;
      it.dst_pitch = cols / 2;
      it.scale_pitch = cols / 16;
      it.rows = it.cols = 128;
      it.w_r1 = it.w_c1 = 128;
      it.s_r1 = 128;
      it.s_c1 = 8;
      it.vec = cuda::PullNvfp4VectorOk(it) ? 1 : 0;
      items.push_back(it);
    }
  }
  const auto* dev_items = reinterpret_cast<const cuda::PullNvfp4Item*>(
      d.Add(items.data(), static_cast<int64_t>(items.size() * sizeof(items[0]))));
  // The same items coding by a threshold table of the global amax.
  char* table = d.Add(nullptr, cuda::kPullNvfp4TableBytes);
  const float* table_amax = gamax;
  const auto* dev_amax_list = reinterpret_cast<const float* const*>(d.Add(&table_amax, 8));
  for (cuda::PullNvfp4Item& it : items) it.table = table;
  const auto* table_items = reinterpret_cast<const cuda::PullNvfp4Item*>(
      d.Add(items.data(), static_cast<int64_t>(items.size() * sizeof(items[0]))));
  const int64_t ni = static_cast<int64_t>(items.size());
  auto time = [](auto fn) { return ::refit::testing::BestMs(fn); };
  const float copy_ms = time([&] { cudaMemcpyAsync(copy, in, n * 2, cudaMemcpyDeviceToDevice); });
  // The trainer's pass before either path: the global amax.
  const float amax_ms = time([&] {
    cudaMemsetAsync(gamax, 0, 4);
    cuda::LaunchNvfp4Amax(box, nullptr, gamax, bad, nullptr);
  });
  const float arith_ms = time([&] { cuda::LaunchPullNvfp4(dev_items, ni, bad, nullptr); });
  const float one_ms = time([&] {
    cuda::LaunchPullNvfp4Tables(dev_amax_list, 1, table, nullptr);
    cuda::LaunchPullNvfp4(table_items, ni, bad, nullptr);
  });
  // Two passes for real: quantize into scratch, then copy it (the pull).
  const float two_copy_ms = time([&] {
    cuda::LaunchNvfp4Quantize(box, nullptr, gamax, reinterpret_cast<unsigned char*>(scratch),
                              reinterpret_cast<unsigned char*>(scratch_scales), nullptr);
    cudaMemcpyAsync(copy, scratch, n / 2, cudaMemcpyDeviceToDevice);
    cudaMemcpyAsync(copy + n / 2, scratch_scales, n / 16, cudaMemcpyDeviceToDevice);
  });
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(FromDevice<long long>(reinterpret_cast<char*>(bad), 1)[0], LLONG_MAX);
  for (const cuda::PullNvfp4Item* run : {dev_items, table_items}) {
    ASSERT_EQ(cudaMemset(out, 0, n / 2), cudaSuccess);
    ASSERT_EQ(cudaMemset(scales, 0, n / 16), cudaSuccess);
    ASSERT_EQ(cuda::LaunchPullNvfp4Tables(dev_amax_list, 1, table, nullptr), 0);
    ASSERT_EQ(cuda::LaunchPullNvfp4(run, ni, bad, nullptr), 0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const bool same = FromDevice<char>(out, n / 2) == FromDevice<char>(scratch, n / 2) &&
                      FromDevice<char>(scales, n / 16) == FromDevice<char>(scratch_scales, n / 16);
    EXPECT_TRUE(same) << "one pass and two passes wrote different bytes, "
                      << (run == table_items ? "by thresholds" : "by arithmetic");
  }
  std::printf("FIGURE nvfp4 quantize-on-pull one pass by arithmetic %.3f ms, by threshold "
              "tables (their build included) %.3f ms\n", arith_ms, one_ms);
  std::printf("FIGURE nvfp4 quantize-on-pull, %lld bf16 N(0, 0.02) elements: one pass %.3f ms; "
              "two passes "
              "(quantize into scratch + copy) %.3f ms; the trainer's global amax pass before "
              "either %.3f ms; device copy of the bf16 bytes %.3f ms; one pass / copy %.2f, "
              "one pass / two passes %.2f, (amax + one pass) / (amax + two passes) %.2f\n",
              static_cast<long long>(n), one_ms, two_copy_ms, amax_ms, copy_ms, one_ms / copy_ms,
              one_ms / two_copy_ms, (amax_ms + one_ms) / (amax_ms + two_copy_ms));
  // A NaN at [300, 5000] is reported by its item: cell (2, 39).
  const uint16_t nan = 0x7FC0;
  ASSERT_EQ(cudaMemcpy(in + 2 * (300 * cols + 5000), &nan, 2, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(bad, &none, 8, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cuda::LaunchPullNvfp4(table_items, ni, bad, nullptr), 0);
  EXPECT_EQ(FromDevice<long long>(reinterpret_cast<char*>(bad), 1)[0], 2 * (cols / 128) + 39);
  std::printf("%s nvfp4 quantize-on-pull: bytes equal the two-pass path, a NaN is named by its "
              "item\n", HasFailure() ? "FAIL" : "PASS");
}

}  // namespace
}  // namespace refit
