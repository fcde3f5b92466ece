#include "exec/convert/cuda/cuda_convert_ops.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "exec/program/copy_program.h"
#include "exec/convert/nvfp4.h"
#include "exec/convert/nvfp4_vllm.h"
#include "exec/convert/cuda/convert_kernels.h"
#include "exec/cuda/cuda_status.h"
#include "exec/convert/cuda/nvfp4_kernels.h"
#include "exec/convert/cuda/nvfp4_vllm_kernels.h"
#include "exec/cuda/pack_kernels.h"
#include "plan/conversion.h"

namespace refit {
namespace {

// The kernels' blocks are the format table's (layout/quant_format.h).
static_assert(cuda::kMxfp8KernelBlock == kMxfp8Block, "MXFP8 kernels and format row disagree");
static_assert(cuda::kNvfp4KernelBlock == kNvfp4Block, "NVFP4 kernels and format row disagree");
static_assert(cuda::kScaleRequant == static_cast<int>(ScaleMode::kPow2Requant) &&
                  cuda::kScaleE8m0 == static_cast<int>(ScaleMode::kE8m0) &&
                  cuda::kScaleRequantE8m0 == static_cast<int>(ScaleMode::kPow2RequantE8m0),
              "the kernels' scale modes are ScaleMode's values");

absl::StatusOr<int> DtypeCode(DType d) {
  switch (d) {
    case DType::kBF16:
      return cuda::kConvertBF16;
    case DType::kF16:
      return cuda::kConvertF16;
    case DType::kF32:
      return cuda::kConvertF32;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("cannot convert from ", DTypeName(d)));
  }
}

absl::StatusOr<cuda::DenseBox> Dense(const char* data, DType dtype, const Box& box,
                                     const std::vector<int64_t>& tile) {
  const int n = box.rank();
  if (n < 2 || tile.size() != static_cast<size_t>(n) ||
      (tile[n - 1] != tile[n - 2] && tile[n - 2] != 1)) {
    return absl::InvalidArgumentError(
        "block tiles must be square (FP8) or 1 x k (MXFP8) on the last two dims");
  }
  REFIT_ASSIGN_OR_RETURN(int code, DtypeCode(dtype));
  cuda::DenseBox b{data, code, 1, box.shape(n - 2), box.shape(n - 1),
                   box.origin(n - 2), box.origin(n - 1), tile[n - 2], tile[n - 1]};
  for (int d = 0; d + 2 < n; ++d) b.L *= box.shape(d);
  // The MXFP8 kernel for whole 1 x 32 blocks numbers its blocks on one
  // grid axis; the others take tile rows and L on theirs (LaunchTileAmax
  // and LaunchQuantize refuse more than 65535 tile rows themselves).
  const bool mx = tile[n - 2] == 1;
  if ((!mx && cuda::TileRows(b) > 65535) || b.L > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("box ", box.ToString(),
                                                   " has too many FP8 tiles for one launch"));
  }
  return b;
}

// NVFP4's dense box: 1 x 16 tiles on the last dim, L the leading dims.
absl::StatusOr<cuda::DenseBox> Nvfp4Dense(const char* data, DType dtype, const Box& box) {
  const int n = box.rank();
  if (n < 2) return absl::InvalidArgumentError("NVFP4 needs 2 or more dims");
  REFIT_ASSIGN_OR_RETURN(int code, DtypeCode(dtype));
  cuda::DenseBox b{data, code, 1, box.shape(n - 2), box.shape(n - 1),
                   box.origin(n - 2), box.origin(n - 1), 1, kNvfp4Block};
  for (int d = 0; d + 2 < n; ++d) b.L *= box.shape(d);
  return b;
}

// The global coordinates of dense element k of `box`.
std::string Coords(const Box& box, long long k) {
  std::vector<int64_t> c(box.rank());
  for (int d = box.rank() - 1; d >= 0; --d) {
    c[d] = box.origin(d) + k % box.shape(d);
    k /= box.shape(d);
  }
  return absl::StrCat("[", absl::StrJoin(c, ", "), "]");
}

class CudaConvertOps : public ConvertOps {
 public:
  explicit CudaConvertOps(void* stream) : s_(static_cast<cudaStream_t>(stream)) {}
  ~CudaConvertOps() override {
    cudaFree(dense_);
    cudaFree(amax_);
    cudaFree(bad_);
    cudaFree(slots_);
    cudaFree(tasks_);
    cudaFreeHost(staging_);
    cudaFree(gslots_);
  }

  absl::StatusOr<const char*> Gather(const Record& r, const Box& part, DType dtype,
                                     absl::Span<char* const> buffers, char* into) override {
    const int64_t es = DTypeSize(dtype);
    REFIT_ASSIGN_OR_RETURN(const char* direct, DenseRecordData(r, part, dtype, buffers));
    if (direct != nullptr) return direct;
    if (into == nullptr) {
      REFIT_RETURN_IF_ERROR(Grow(&dense_, &dense_bytes_, UncheckedNumElements(part) * es));
      into = dense_;
    }
    std::vector<CopyTask> tasks;
    REFIT_RETURN_IF_ERROR(AppendRecordTasks(r, es, part, 0, /*to_stream=*/true, &tasks));
    REFIT_ASSIGN_OR_RETURN(std::vector<ResolvedCopy> copies,
                           ResolveTasks(tasks, buffers, {}, nullptr, into));
    const int64_t bytes = copies.size() * sizeof(ResolvedCopy);
    REFIT_RETURN_IF_ERROR(Grow(&tasks_, &tasks_bytes_, bytes));
    // Stream-ordered after the previous gather's launch, which may still
    // read the task array; the dense buffer is likewise reused in stream
    // order.
    REFIT_RETURN_IF_ERROR(AnnotateStatus(Upload(copies.data(), bytes, tasks_), "gather tasks"));
    REFIT_RETURN_IF_ERROR(CudaStatus(
        static_cast<cudaError_t>(cuda::LaunchCopies(
            reinterpret_cast<const ResolvedCopy*>(tasks_), static_cast<int>(copies.size()),
            s_)),
        "gather launch"));
    return into;
  }

  absl::StatusOr<std::vector<float>> TileAmax(const char* dense, DType dtype, const Box& box,
                                              const std::vector<int64_t>& tile) override {
    REFIT_ASSIGN_OR_RETURN(cuda::DenseBox b, Dense(dense, dtype, box, tile));
    const int64_t n = b.L * cuda::TileRows(b) * cuda::TileCols(b);
    REFIT_RETURN_IF_ERROR(Grow(&amax_, &amax_bytes_, n * 4));
    REFIT_RETURN_IF_ERROR(ResetBad());
    REFIT_RETURN_IF_ERROR(CudaStatus(
        static_cast<cudaError_t>(cuda::LaunchTileAmax(b, reinterpret_cast<float*>(amax_),
                                                      bad_, s_)),
        "tile amax launch"));
    std::vector<float> out(n);
    REFIT_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(out.data(), amax_, n * 4, cudaMemcpyDeviceToHost, s_), "amax to host"));
    REFIT_RETURN_IF_ERROR(CheckBad(box));
    return out;
  }

  absl::Status Quantize(const char* dense, DType dtype, const Box& box,
                        const std::vector<int64_t>& tile, const std::vector<float>& amax,
                        ScaleMode mode, char* out, char* scales) override {
    REFIT_ASSIGN_OR_RETURN(cuda::DenseBox b, Dense(dense, dtype, box, tile));
    const int64_t bytes = static_cast<int64_t>(amax.size()) * 4;
    REFIT_RETURN_IF_ERROR(Grow(&amax_, &amax_bytes_, bytes));
    REFIT_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(s_), "conversion stream"));
    REFIT_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpy(amax_, amax.data(), bytes, cudaMemcpyHostToDevice), "amax to device"));
    return CudaStatus(
        static_cast<cudaError_t>(cuda::LaunchQuantize(
            b, reinterpret_cast<const float*>(amax_), static_cast<int>(mode),
            reinterpret_cast<unsigned char*>(out), scales, s_)),
        "quantize launch");
  }

  absl::StatusOr<Nvfp4Amaxes> Nvfp4Amax(const char* dense, DType dtype, const Box& box,
                                        bool blocks) override {
    REFIT_ASSIGN_OR_RETURN(cuda::DenseBox b, Nvfp4Dense(dense, dtype, box));
    const int64_t tiles = b.L * b.R * ((b.c0 + b.C + 15) / 16 - b.c0 / 16);
    const int64_t bytes = (b.L + (blocks ? tiles : 0)) * 4;
    REFIT_RETURN_IF_ERROR(Grow(&amax_, &amax_bytes_, bytes));
    REFIT_RETURN_IF_ERROR(ResetBad());
    float* global = reinterpret_cast<float*>(amax_);
    REFIT_RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(global, 0, b.L * 4, s_), "amax"));
    REFIT_RETURN_IF_ERROR(CudaStatus(
        static_cast<cudaError_t>(cuda::LaunchNvfp4Amax(b, blocks ? global + b.L : nullptr,
                                                       global, bad_, s_)),
        "nvfp4 amax launch"));
    Nvfp4Amaxes a;
    a.global.resize(b.L);
    if (blocks) a.block.resize(tiles);
    REFIT_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(a.global.data(), global, b.L * 4, cudaMemcpyDeviceToHost, s_),
        "amax to host"));
    if (blocks) {
      REFIT_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(a.block.data(), global + b.L,
                                                       tiles * 4, cudaMemcpyDeviceToHost, s_),
                                       "amax to host"));
    }
    REFIT_RETURN_IF_ERROR(CheckBad(box));
    return a;
  }

  // Deferred: the amaxes go to a slot range of gslots_, the non-finite
  // flag to a slot of slots_; Sync() reads them all back at once.
  absl::Status Nvfp4GlobalAmax(const char* dense, DType dtype, const Box& box,
                               std::vector<float>* global, absl::string_view what) override {
    REFIT_ASSIGN_OR_RETURN(cuda::DenseBox b, AnnotateStatus(Nvfp4Dense(dense, dtype, box), what));
    if (pending_.size() == kSlots || gused_ + b.L > gcap_) REFIT_RETURN_IF_ERROR(Sync());
    if (b.L > gcap_) {
      cudaFree(gslots_);
      gslots_ = nullptr;
      gcap_ = 0;
      REFIT_RETURN_IF_ERROR(CudaStatus(
          cudaMalloc(reinterpret_cast<void**>(&gslots_), std::max<int64_t>(b.L, 1 << 14) * 4),
          "cudaMalloc of the amax slots"));
      gcap_ = std::max<int64_t>(b.L, 1 << 14);
    }
    REFIT_RETURN_IF_ERROR(Slots());
    if (gused_ == 0) {  // every slot of the batch zeroed at once
      REFIT_RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(gslots_, 0, gcap_ * 4, s_), "amax"));
    }
    long long* slot = slots_ + pending_.size();
    pending_.push_back({box, std::string(what)});
    float* g = gslots_ + gused_;
    gpending_.push_back({global, gused_, b.L});
    gused_ += b.L;
    return CudaStatus(
        static_cast<cudaError_t>(cuda::LaunchNvfp4Amax(b, nullptr, g, slot, s_)),
        absl::StrCat(what, ": nvfp4 amax launch"));
  }

  absl::Status QuantizeNvfp4(const char* dense, DType dtype, const Box& box,
                             Nvfp4Recipe recipe, const std::vector<float>& block_amax,
                             const std::vector<float>& global_amax, char* out, char* scales,
                             char* global_scales) override {
    REFIT_ASSIGN_OR_RETURN(cuda::DenseBox b, Nvfp4Dense(dense, dtype, box));
    if (static_cast<int64_t>(global_amax.size()) != b.L) {
      return absl::InvalidArgumentError("NVFP4: one global amax per leading index");
    }
    // Per leading index what the kernel takes (ModelOpt's the amax, vLLM's
    // its SFScale), then the f32 global scale the engine keeps, then the
    // block amaxes: to the device, in stream order after the previous step
    // that read amax_.
    const bool vllm = recipe == Nvfp4Recipe::kVllm;
    std::vector<float> host;
    for (float a : global_amax) host.push_back(vllm ? Nvfp4VllmGlobalScale(a) : a);
    for (int64_t l = 0; l < b.L; ++l) {
      host.push_back(vllm ? Nvfp4VllmWeightScale2Of(host[l]) : Nvfp4GlobalScale(host[l]));
    }
    host.insert(host.end(), block_amax.begin(), block_amax.end());
    REFIT_RETURN_IF_ERROR(Grow(&amax_, &amax_bytes_, static_cast<int64_t>(host.size()) * 4));
    REFIT_RETURN_IF_ERROR(AnnotateStatus(
        Upload(host.data(), static_cast<int64_t>(host.size()) * 4, amax_), "amax to device"));
    const float* g = reinterpret_cast<const float*>(amax_);
    if (global_scales != nullptr) {
      REFIT_RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(global_scales, g + b.L, b.L * 4, cudaMemcpyDeviceToDevice, s_),
          "global scales"));
    }
    const float* blocks = block_amax.empty() ? nullptr : g + 2 * b.L;
    if (vllm) {
      return CudaStatus(cuda::LaunchNvfp4VllmQuantizeBox(b, blocks, g,
                                                         reinterpret_cast<uint8_t*>(out),
                                                         reinterpret_cast<uint8_t*>(scales), s_),
                        "nvfp4 (vLLM recipe) quantize launch");
    }
    return CudaStatus(static_cast<cudaError_t>(cuda::LaunchNvfp4Quantize(
                          b, blocks, g, reinterpret_cast<unsigned char*>(out),
                          reinterpret_cast<unsigned char*>(scales), s_)),
                      "nvfp4 quantize launch");
  }

  // Non-finite checks are deferred: each call gets a slot of a device flag
  // array, reset once per batch and read back once, by Sync().
  absl::Status QuantizeWhole(const char* dense, DType dtype, const Box& box,
                             const std::vector<int64_t>& tile, ScaleMode mode, char* out,
                             char* scales, absl::string_view what) override {
    REFIT_ASSIGN_OR_RETURN(cuda::DenseBox b, AnnotateStatus(Dense(dense, dtype, box, tile), what));
    if (pending_.size() == kSlots) REFIT_RETURN_IF_ERROR(Sync());
    REFIT_RETURN_IF_ERROR(Slots());
    long long* slot = slots_ + pending_.size();
    pending_.push_back({box, std::string(what)});
    return CudaStatus(static_cast<cudaError_t>(cuda::LaunchQuantizeFused(
                          b, static_cast<int>(mode), reinterpret_cast<unsigned char*>(out),
                          scales, slot, s_)),
                      absl::StrCat(what, ": quantize launch"));
  }

  absl::Status StoreF32(absl::Span<const float> values, char* out) override {
    return Upload(values.data(), static_cast<int64_t>(values.size()) * 4, out);
  }

  absl::Status Cast(const char* dense, DType dtype, int64_t n, bool neg_exp,
                    char* out) override {
    REFIT_ASSIGN_OR_RETURN(int code, DtypeCode(dtype));
    return CudaStatus(static_cast<cudaError_t>(cuda::LaunchCastF32(
                          dense, code, n, neg_exp, reinterpret_cast<float*>(out), s_)),
                      "cast launch");
  }

  absl::Status Sync() override {
    std::vector<long long> flags(pending_.size());
    if (!flags.empty()) {
      REFIT_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(flags.data(), slots_,
                                                       flags.size() * sizeof(long long),
                                                       cudaMemcpyDeviceToHost, s_),
                                       "non-finite flags"));
    }
    std::vector<float> amaxes(gused_);
    if (gused_ > 0) {
      REFIT_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(amaxes.data(), gslots_, gused_ * 4,
                                                       cudaMemcpyDeviceToHost, s_),
                                       "amaxes to host"));
    }
    REFIT_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(s_), "conversion kernels"));
    staged_ = 0;
    gused_ = 0;
    for (const GlobalPending& g : gpending_) {
      g.out->assign(amaxes.begin() + g.at, amaxes.begin() + g.at + g.count);
    }
    gpending_.clear();
    std::vector<Pending> pending = std::move(pending_);
    pending_.clear();
    for (size_t i = 0; i < flags.size(); ++i) {
      if (flags[i] < kNone) {
        return absl::InvalidArgumentError(absl::StrCat(
            pending[i].what, ": non-finite value at ", Coords(pending[i].box, flags[i])));
      }
    }
    return absl::OkStatus();
  }
  int64_t workspace_bytes() const override {
    return dense_bytes_ + amax_bytes_ + tasks_bytes_ + (bad_ != nullptr ? 8 : 0) +
           (slots_ != nullptr ? static_cast<int64_t>(kSlots * sizeof(long long)) : 0);
  }

 private:
  // Copies host bytes to device memory `out` on the stream through pinned
  // staging memory, so the copy is queued without a wait (a pageable source
  // would synchronize the stream); the staging is reused after Sync().
  absl::Status Upload(const void* host, int64_t bytes, void* out) {
    if (bytes == 0) return absl::OkStatus();
    const int64_t need = (bytes + 15) / 16 * 16;
    if (staged_ + need > staging_cap_) {
      REFIT_RETURN_IF_ERROR(Sync());
      if (need > staging_cap_) {
        cudaFreeHost(staging_);
        staging_ = nullptr;
        staging_cap_ = 0;
        const int64_t cap = std::max<int64_t>(need, 1 << 20);
        REFIT_RETURN_IF_ERROR(CudaStatus(cudaMallocHost(reinterpret_cast<void**>(&staging_), cap),
                                         "cudaMallocHost of the upload staging"));
        staging_cap_ = cap;
      }
    }
    char* p = staging_ + staged_;
    std::memcpy(p, host, bytes);
    staged_ += need;
    return CudaStatus(cudaMemcpyAsync(out, p, bytes, cudaMemcpyHostToDevice, s_), "upload");
  }

  // Replaces *p by an allocation of at least `need` bytes once every step
  // queued (which may use the old one) is done.
  absl::Status Grow(void* p, int64_t* have, int64_t need) {
    if (need <= *have) return absl::OkStatus();
    char** ptr = static_cast<char**>(p);
    if (*ptr != nullptr) {
      REFIT_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(s_), "conversion stream"));
    }
    cudaFree(*ptr);
    *ptr = nullptr;
    *have = 0;
    REFIT_RETURN_IF_ERROR(CudaStatus(cudaMalloc(reinterpret_cast<void**>(ptr), need),
                                     absl::StrCat("cudaMalloc of ", need,
                                                  " bytes for conversions")));
    *have = need;
    return absl::OkStatus();
  }
  // The non-finite flags of deferred steps, reset when none is pending.
  absl::Status Slots() {
    if (slots_ == nullptr) {
      REFIT_RETURN_IF_ERROR(CudaStatus(
          cudaMalloc(reinterpret_cast<void**>(&slots_), kSlots * sizeof(long long)),
          "cudaMalloc of the non-finite flags"));
    }
    if (!pending_.empty()) return absl::OkStatus();
    // 0x7F.. in every byte: above any element index ("none").
    return CudaStatus(cudaMemsetAsync(slots_, 0x7F, kSlots * sizeof(long long), s_),
                      "non-finite flags");
  }
  absl::Status ResetBad() {
    if (bad_ == nullptr) {
      REFIT_RETURN_IF_ERROR(CudaStatus(cudaMalloc(reinterpret_cast<void**>(&bad_), 8),
                                       "cudaMalloc"));
    }
    const long long none = LLONG_MAX;
    return CudaStatus(cudaMemcpyAsync(bad_, &none, 8, cudaMemcpyHostToDevice, s_),
                      "non-finite flag");
  }
  absl::Status CheckBad(const Box& box) {
    long long bad = LLONG_MAX;
    REFIT_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(&bad, bad_, 8, cudaMemcpyDeviceToHost, s_), "flag"));
    REFIT_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(s_), "conversion kernels"));
    if (bad == LLONG_MAX) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("non-finite value at ", Coords(box, bad)));
  }

  // A QuantizeWhole whose non-finite flag Sync() has not read yet.
  struct Pending {
    Box box;
    std::string what;
  };
  static constexpr size_t kSlots = 4096;
  static constexpr long long kNone = 0x7F7F7F7F7F7F7F7FLL;
  long long* slots_ = nullptr;  // device, kSlots
  std::vector<Pending> pending_;
  // Nvfp4GlobalAmax's results: gcap_ floats of device slots, gused_ of
  // them pending, each range for one caller's vector.
  struct GlobalPending {
    std::vector<float>* out;
    int64_t at, count;
  };
  float* gslots_ = nullptr;
  int64_t gcap_ = 0, gused_ = 0;
  std::vector<GlobalPending> gpending_;

  cudaStream_t s_;
  char* dense_ = nullptr;
  int64_t dense_bytes_ = 0;
  char* amax_ = nullptr;
  int64_t amax_bytes_ = 0;
  char* tasks_ = nullptr;
  int64_t tasks_bytes_ = 0;
  long long* bad_ = nullptr;
  char* staging_ = nullptr;  // pinned, staging_cap_ bytes, staged_ in use
  int64_t staging_cap_ = 0;
  int64_t staged_ = 0;
};

}  // namespace

std::unique_ptr<ConvertOps> MakeCudaConvertOps(void* stream) {
  return std::make_unique<CudaConvertOps>(stream);
}

}  // namespace refit
