// GPU check of quantize-on-pull (exec/pull/fused_pull.h, the kernel of
// convert_kernels.h through fused_pull_items.h): for planner cases (FP8
// 128 x 128 with float, UE8M0 and DeepGEMM's requantized scales,
// FlashInfer's layout, records cutting tiles (FSDP's flat shards, a TP
// cut through MXFP8 blocks: scales read from their owners' scratch, which
// the trainers' host conversions fill), MXFP8 with
// whole and interleaved cells), every engine rank's items run on the GPU
// leave its buffers bit-equal to the host run of the same items (which
// tests/dataplane:fused_pull_test holds to the reference quantizer); a NaN
// is reported by its item. Then the throughput on a 16384 x 16384 BF16
// weight: one fused pass next to a device copy of the BF16 bytes and next
// to the two passes it replaces (quantize into scratch, copy the scratch).
// Prints PASS/FAIL and FIGURE lines; SKIP and REFIT_GPU_SKIP without a
// device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "exec/convert/convert.h"
#include "exec/convert/cuda/convert_kernels.h"
#include "exec/convert/cuda/cuda_convert_ops.h"
#include "exec/pull/cuda/fused_pull_items.h"
#include "exec/convert/cuda/pull_quantize_kernels.h"
#include "exec/pull/fused_pull.h"
#include "exec/pull/pull_program.h"
#include "gtest/gtest.h"
#include "mapping/mapping.h"
#include "plan/plan_codec.h"
#include "plan/planner.h"
#include "testing/gpu_test.h"
#include "testing/planned_case.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

using testing::DeviceCopies;
using testing::FromDevice;

struct Case {
  const char* model;
  const char* trainer;
  const char* engine;
};

// Runs `items` on the GPU; returns the bad-item flag.
long long RunOnGpu(const std::vector<cuda::PullQuantItem>& items) {
  DeviceCopies d;
  char* dev = d.Add(items.data(), static_cast<int64_t>(items.size() * sizeof(items[0])));
  const long long none = LLONG_MAX;
  char* bad = d.Add(&none, 8);
  EXPECT_EQ(cuda::LaunchPullQuantize(reinterpret_cast<const cuda::PullQuantItem*>(dev),
                                     static_cast<int64_t>(items.size()),
                                     reinterpret_cast<long long*>(bad), nullptr),
            0);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return FromDevice<long long>(bad, 1)[0];
}

TEST(FusedPullGpuTest, KernelEqualsHostItemsOnPlannerCases) {
  REFIT_SKIP_WITHOUT_GPU("fused_pull_gpu_test");
  const Case cases[] = {
      {"tiny-qwen3-moe-b128", "megatron:tp=1", "vllm:tp=2,quant=fp8"},
      {"tiny-qwen3-moe-b128", "megatron:tp=2,ep=2,etp=1", "vllm:tp=2,quant=fp8-ue8m0"},
      {"tiny-qwen3-moe-b128", "megatron:tp=2,ep=2,etp=1",
       "vllm:tp=2,dp=2,ep=4,quant=fp8,kernel=flashinfer"},
      {"tiny-qwen3-moe-b128", "megatron:tp=2,ep=2,etp=1", "vllm:tp=2,quant=fp8,kernel=deepgemm"},
      {"tiny-qwen3-mx", "megatron:tp=1", "vllm:tp=2,quant=mxfp8"},
      {"tiny-qwen3-mx", "fsdp:dp=3", "vllm:tp=1,dp=2,quant=mxfp8"},
      {"tiny-qwen3-mx", "fsdp:dp=3", "vllm:tp=1,dp=2,quant=mxfp8,kernel=flashinfer"},
      {"tiny-qwen3-moe-mx", "megatron:tp=2,ep=2,etp=1", "vllm:tp=2,quant=mxfp8"},
      // Records that cut tiles: scales from their owners' scratch.
      {"tiny-qwen3-moe-b128", "fsdp:dp=3", "vllm:tp=1,dp=2,quant=fp8"},
      {"tiny-qwen3-mx", "megatron:tp=4", "vllm:tp=2,quant=mxfp8"}};
  for (const Case& c : cases) {
    testing::PlannedCase pc;
    const absl::Status planned = testing::PlanCase(c.model, c.trainer, c.engine, &pc);
    ASSERT_TRUE(planned.ok()) << planned;
    auto& [model, src, dst, plan] = pc;
    OwnedBuffers s = AllocateBuffers(src->layout);
    FillPattern(src->layout, s.ptrs, {-1, 4});
    const int32_t ws = plan->src.world_size;
    std::vector<Plan> tslices;
    std::vector<std::set<int32_t>> fused;
    std::vector<std::map<std::string, uint8_t*>> named(ws);
    for (int32_t t = 0; t < ws; ++t) {
      tslices.push_back(*FromProto(ToProto(ExtractSlice(*plan, Side::kTrainer, t))));
      fused.push_back(FusableConversions(tslices[t], t, {}));
    }
    for (size_t b = 0; b < src->layout.buffers.size(); ++b) {
      named[src->layout.buffers[b].rank][src->layout.buffers[b].name] = s.ptrs[b];
    }
    // What the trainers still convert (host loops, cut tiles' amaxes
    // exchanged): the scale scratch of records that cut tiles, which
    // their receivers' items read.
    std::vector<std::vector<std::vector<char>>> scratch(ws);
    std::vector<std::vector<char*>> tbuf(ws);
    {
      std::vector<Plan> kept;
      std::vector<Converter> conv;
      std::vector<std::map<int32_t, std::vector<float>>> sent(ws);
      auto ops = MakeHostConvertOps();
      for (int32_t t = 0; t < ws; ++t) {
        kept.push_back(WithoutConversions(tslices[t], fused[t]).plan);
        tbuf[t].assign(kept[t].src.buffers.size(), nullptr);
        for (size_t b = 0; b < kept[t].src.buffers.size(); ++b) {
          const BufferSpec& spec = kept[t].src.buffers[b];
          if (spec.rank != t) continue;
          if (spec.scratch) {
            scratch[t].emplace_back(spec.byte_size, 0);
            tbuf[t][b] = scratch[t].back().data();
          } else if (named[t].count(spec.name)) {
            tbuf[t][b] = reinterpret_cast<char*>(named[t].at(spec.name));
          }
        }
      }
      for (int32_t t = 0; t < ws; ++t) {
        auto c = Converter::Create(kept[t], t);
        ASSERT_TRUE(c.ok()) << c.status();
        auto p = c->Partials(*ops, tbuf[t]);
        ASSERT_TRUE(p.ok()) << p.status();
        sent[t] = *std::move(p);
        conv.push_back(*std::move(c));
      }
      for (int32_t t = 0; t < ws; ++t) {
        std::map<int32_t, std::vector<float>> received;
        for (const auto& [peer, count] : conv[t].peers()) received[peer] = sent[peer].at(t);
        ASSERT_TRUE(conv[t].Finish(*ops, tbuf[t], received).ok());
      }
      // The same conversions with the CUDA steps (scales only where the
      // receivers quantize on pull) write the same scratch bytes.
      DeviceCopies tdev;
      std::vector<std::vector<char*>> dbuf(ws);
      auto cuda_ops = MakeCudaConvertOps(nullptr);
      for (int32_t t = 0; t < ws; ++t) {
        dbuf[t].assign(tbuf[t].size(), nullptr);
        for (size_t b = 0; b < tbuf[t].size(); ++b) {
          if (tbuf[t][b] == nullptr) continue;
          const BufferSpec& spec = kept[t].src.buffers[b];
          dbuf[t][b] = tdev.Add(spec.scratch ? nullptr : tbuf[t][b], spec.byte_size);
        }
        auto p = conv[t].Partials(*cuda_ops, dbuf[t]);
        ASSERT_TRUE(p.ok()) << p.status();
        sent[t] = *std::move(p);
      }
      int64_t scratch_differ = 0;
      for (int32_t t = 0; t < ws; ++t) {
        std::map<int32_t, std::vector<float>> received;
        for (const auto& [peer, count] : conv[t].peers()) received[peer] = sent[peer].at(t);
        ASSERT_TRUE(conv[t].Finish(*cuda_ops, dbuf[t], received).ok());
        for (size_t b = 0; b < tbuf[t].size(); ++b) {
          const BufferSpec& spec = kept[t].src.buffers[b];
          if (!spec.scratch || tbuf[t][b] == nullptr) continue;
          const std::vector<char> got = FromDevice<char>(dbuf[t][b], spec.byte_size);
          for (int64_t i = 0; i < spec.byte_size; ++i) scratch_differ += got[i] != tbuf[t][b][i];
        }
      }
      EXPECT_EQ(scratch_differ, 0) << "trainer scratch, CUDA vs host";
    }
    int64_t items_run = 0, differ = 0;
    for (int32_t e = 0; e < plan->dst.world_size; ++e) {
      const Plan slice = *FromProto(ToProto(ExtractSlice(*plan, Side::kEngine, e)));
      const PullProgram program = *BuildPullProgram(slice, e);
      DeviceCopies dev;
      std::map<int32_t, std::vector<const char*>> host_src;
      std::map<int32_t, std::vector<char*>> dev_src;
      std::map<int32_t, std::vector<FusedSource>> sources;
      for (const PullPeer& peer : program.peers) {
        const int32_t t = peer.src_rank;
        const std::vector<int32_t> exported = ExportedSourceBuffers(tslices[t], t, e, fused[t]);
        host_src[t].assign(slice.src.buffers.size(), nullptr);
        dev_src[t].assign(slice.src.buffers.size(), nullptr);
        for (size_t p = 0; p < exported.size(); ++p) {
          const BufferSpec& spec = tslices[t].src.buffers[exported[p]];
          // Scratch: the scales of records that cut tiles (two-pass
          // scratch is not read by items).
          const char* h = spec.scratch ? tbuf[t][exported[p]]
                                       : reinterpret_cast<const char*>(named[t].at(spec.name));
          if (h == nullptr) continue;
          host_src[t][peer.buffers[p]] = h;
          dev_src[t][peer.buffers[p]] = dev.Add(h, spec.byte_size);
        }
        sources[t] = FusedSourcesOf(tslices[t], t, e, fused[t]);
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
      auto items = ResolveFusedItems(fp->items, dev_src, dd);
      ASSERT_TRUE(items.ok()) << items.status();
      EXPECT_EQ(RunOnGpu(*items), LLONG_MAX) << "no non-finite values";
      items_run += static_cast<int64_t>(items->size());
      for (size_t b = 0; b < host_dst.size(); ++b) {
        const std::vector<char> got = FromDevice<char>(dd[b], host_dst[b].size());
        for (size_t i = 0; i < got.size(); ++i) differ += got[i] != host_dst[b][i];
      }
    }
    EXPECT_GT(items_run, 0) << c.engine;
    EXPECT_EQ(differ, 0) << c.model << " " << c.trainer << " -> " << c.engine;
    std::printf("%s quantize-on-pull %s %s -> %s: %lld items, %lld bytes differ from the host\n",
                HasFailure() ? "FAIL" : "PASS", c.model, c.trainer, c.engine,
                static_cast<long long>(items_run), static_cast<long long>(differ));
  }
}

// One weight [rows, cols] of BF16 covered by items of cells x cells
// elements (tiles tile_r x tile_c), codes and scales written row-major.
std::vector<cuda::PullQuantItem> WholeWeight(const char* in, int64_t rows, int64_t cols,
                                             int tile_r, int tile_c, int mode,
                                             unsigned char* out, unsigned char* scales) {
  std::vector<cuda::PullQuantItem> v;
  const int64_t es = mode == cuda::kScaleE8m0 ? 1 : 4;
  const int64_t tiles_c = cols / tile_c;
  for (int64_t i = 0; i < rows; i += 128) {
    for (int64_t j = 0; j < cols; j += 128) {
      cuda::PullQuantItem it{};
      it.src = in + 2 * (i * cols + j);
      it.dst = out + i * cols + j;
      it.scales = scales + es * ((i / tile_r) * tiles_c + j / tile_c);
      it.src_pitch = cols;
      it.dst_pitch = cols;
      it.scale_pitch = tiles_c;
      it.rows = it.cols = 128;
      it.w_r1 = it.w_c1 = 128;
      it.s_r1 = 128 / tile_r;
      it.s_c1 = 128 / tile_c;
      it.mode = mode;
      it.tile_r = tile_r;
      it.tile_c = tile_c;
      it.vec = cuda::PullQuantVectorOk(it) ? 1 : 0;
      v.push_back(it);
    }
  }
  return v;
}

TEST(FusedPullGpuTest, OnePassNextToACopyAndTwoPasses) {
  REFIT_SKIP_WITHOUT_GPU("fused_pull_gpu_test");
  const int64_t rows = 16384, cols = 16384, n = rows * cols;
  DeviceCopies d;
  char* in = d.Add(nullptr, n * 2);
  char* copy = d.Add(nullptr, n * 2);
  char* out = d.Add(nullptr, n);
  char* scratch = d.Add(nullptr, n);
  char* scales = d.Add(nullptr, n / 32 * 4);
  char* scale_copy = d.Add(nullptr, n / 32 * 4);
  ASSERT_EQ(cudaMemset(in, 0x3c, n * 2), cudaSuccess);
  const long long none = LLONG_MAX;
  long long* bad = reinterpret_cast<long long*>(d.Add(&none, 8));
  auto time = [](auto fn) { return ::refit::testing::BestMs(fn); };
  const float copy_ms = time([&] { cudaMemcpyAsync(copy, in, n * 2, cudaMemcpyDeviceToDevice); });
  struct Format {
    const char* name;
    int tile_r, tile_c, mode;
  };
  for (const Format& f : {Format{"fp8 128x128", 128, 128, cuda::kScaleFloat},
                          Format{"mxfp8 1x32", 1, 32, cuda::kScaleE8m0}}) {
    const std::vector<cuda::PullQuantItem> items =
        WholeWeight(in, rows, cols, f.tile_r, f.tile_c, f.mode,
                    reinterpret_cast<unsigned char*>(out), reinterpret_cast<unsigned char*>(scales));
    char* dev_items = d.Add(items.data(), static_cast<int64_t>(items.size() * sizeof(items[0])));
    const int64_t scale_bytes = (f.mode == cuda::kScaleE8m0 ? 1 : 4) * n / (f.tile_r * f.tile_c);
    // Every launch shape (threads per block; a block per item or a
    // persistent grid); the default's time is the one-pass figure.
    struct Shape {
      int threads;
      bool persistent, compact;
    };
    float fused_ms = 0;
    std::string shapes;
    for (const Shape& sh : {Shape{256, true, false}, Shape{256, true, true},
                            Shape{256, false, false}, Shape{128, true, false}}) {
      const float ms = time([&] {
        cuda::LaunchPullQuantizeShape(reinterpret_cast<const cuda::PullQuantItem*>(dev_items),
                                      static_cast<int64_t>(items.size()), bad, nullptr,
                                      sh.threads, sh.persistent, sh.compact);
      });
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<char> got = FromDevice<char>(out, n);
      if (sh.threads == 256 && !sh.persistent && !sh.compact) {
        fused_ms = ms;
      } else {
        const float ref = time([&] {
          cuda::LaunchPullQuantize(reinterpret_cast<const cuda::PullQuantItem*>(dev_items),
                                   static_cast<int64_t>(items.size()), bad, nullptr);
        });
        (void)ref;
        EXPECT_TRUE(got == FromDevice<char>(out, n)) << f.name << " shape " << sh.threads;
      }
      shapes += absl::StrFormat(" %d threads %s%s %.3f ms;", sh.threads,
                                sh.persistent ? "persistent" : "per item",
                                sh.compact ? " (48 registers)" : "", ms);
    }
    std::printf("FIGURE quantize-on-pull %s launch shapes:%s\n", f.name, shapes.c_str());
    // Two passes: quantize into scratch (the trainer), copy it (the pull).
    const cuda::DenseBox box{in, cuda::kConvertBF16, 1, rows, cols, 0, 0, f.tile_r, f.tile_c};
    const float two_ms = time([&] {
      cuda::LaunchQuantizeFused(box, f.mode, reinterpret_cast<unsigned char*>(scratch),
                                scale_copy, bad, nullptr);
      cudaMemcpyAsync(out, scratch, n, cudaMemcpyDeviceToDevice);
      cudaMemcpyAsync(scales, scale_copy, scale_bytes, cudaMemcpyDeviceToDevice);
    });
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(FromDevice<long long>(reinterpret_cast<char*>(bad), 1)[0], LLONG_MAX);
    // The one-pass bytes equal the two-pass bytes.
    const float fused_again = time([&] {
      cuda::LaunchPullQuantize(reinterpret_cast<const cuda::PullQuantItem*>(dev_items),
                               static_cast<int64_t>(items.size()), bad, nullptr);
    });
    (void)fused_again;
    const std::vector<char> one = FromDevice<char>(out, n);
    const std::vector<char> two = FromDevice<char>(scratch, n);
    const std::vector<char> s1 = FromDevice<char>(scales, scale_bytes);
    const std::vector<char> s2 = FromDevice<char>(scale_copy, scale_bytes);
    EXPECT_TRUE(one == two && s1 == s2) << f.name;
    std::printf("FIGURE quantize-on-pull %s, %lld bf16 elements: one pass %.3f ms; two passes "
                "(quantize into scratch + copy) %.3f ms; device copy of the bf16 bytes %.3f ms; "
                "one pass / copy %.2f, one pass / two passes %.2f\n",
                f.name, static_cast<long long>(n), fused_ms, two_ms, copy_ms, fused_ms / copy_ms,
                fused_ms / two_ms);
    // A NaN at [300, 5000] is reported by its item: cell (2, 39).
    const uint16_t nan = 0x7FC0;
    ASSERT_EQ(cudaMemcpy(in + 2 * (300 * cols + 5000), &nan, 2, cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(bad, &none, 8, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::LaunchPullQuantize(reinterpret_cast<const cuda::PullQuantItem*>(dev_items),
                             static_cast<int64_t>(items.size()), bad, nullptr);
    EXPECT_EQ(FromDevice<long long>(reinterpret_cast<char*>(bad), 1)[0], 2 * (cols / 128) + 39);
    ASSERT_EQ(cudaMemset(in, 0x3c, n * 2), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(bad, &none, 8, cudaMemcpyHostToDevice), cudaSuccess);
    std::printf("%s quantize-on-pull %s: bytes equal the two-pass path, a NaN is named by its "
                "item\n", HasFailure() ? "FAIL" : "PASS", f.name);
  }
}

}  // namespace
}  // namespace refit
