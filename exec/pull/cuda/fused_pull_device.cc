// FusedPullDevice (see fused_pull_device.h).
#include "exec/pull/cuda/fused_pull_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_status.h"
#include "exec/pull/cuda/fused_pull_items.h"
#include "exec/pull/cuda/pull_nvfp4_items.h"
#include "exec/pull/cuda/pull_nvfp4_kernels.h"
#include "exec/convert/cuda/pull_quantize_kernels.h"

namespace refit {
namespace {

// Device errors are UNAVAILABLE on the pull path (pull_runner.h).
absl::Status Cuda(cudaError_t e, const std::string& what) {
  return CudaStatus(e, what, absl::StatusCode::kUnavailable);
}

absl::Status Upload(const void* host, size_t bytes, void** dev) {
  if (bytes == 0) return absl::OkStatus();
  REFIT_RETURN_IF_ERROR(Cuda(cudaMalloc(dev, bytes), "cudaMalloc of quantize items"));
  return Cuda(cudaMemcpy(*dev, host, bytes, cudaMemcpyHostToDevice),
                    "cudaMemcpy of quantize items");
}

}  // namespace

absl::StatusOr<std::unique_ptr<FusedPullDevice>> FusedPullDevice::Create(
    const Plan& slice, const FusedProgram& quant,
    const std::map<int32_t, std::vector<char*>>& src, absl::Span<char* const> dst) {
  std::unique_ptr<FusedPullDevice> d(new FusedPullDevice());
  std::vector<FusedItem> others, nv;
  for (const FusedItem& it : quant.items) (IsNvfp4Item(it) ? nv : others).push_back(it);
  for (const std::vector<FusedItem>* list : {&others, &nv}) {
    for (const FusedItem& it : *list) {
      d->where_.emplace_back(slice.src.tensors[it.tensor].name, it.where);
    }
  }
  REFIT_ASSIGN_OR_RETURN(std::vector<cuda::PullQuantItem> q, ResolveFusedItems(others, src, dst));
  REFIT_ASSIGN_OR_RETURN(std::vector<cuda::PullNvfp4Item> n, ResolveNvfp4Items(nv, src, dst));
  REFIT_RETURN_IF_ERROR(d->AddNvfp4Tables(slice, nv, src, &n));
  REFIT_RETURN_IF_ERROR(Cuda(cudaMalloc(&d->bad_, 24), "cudaMalloc"));
  REFIT_RETURN_IF_ERROR(Upload(q.data(), q.size() * sizeof(q[0]), &d->quant_));
  REFIT_RETURN_IF_ERROR(Upload(n.data(), n.size() * sizeof(n[0]), &d->nv_));
  d->num_quant_ = static_cast<int64_t>(q.size());
  d->num_nv_ = static_cast<int64_t>(n.size());
  return d;
}

absl::Status FusedPullDevice::AddNvfp4Tables(const Plan& slice, const std::vector<FusedItem>& nv,
                                             const std::map<int32_t, std::vector<char*>>& src,
                                             std::vector<cuda::PullNvfp4Item>* items) {
  std::map<const float*, int64_t> index;
  std::vector<const float*> amax;
  std::vector<int> engine;  // per table: every item's amax computed here
  for (const cuda::PullNvfp4Item& it : *items) {
    if (index.emplace(it.global_amax, static_cast<int64_t>(amax.size())).second) {
      amax.push_back(it.global_amax);
      engine.push_back(1);
    }
  }
  for (size_t k = 0; k < items->size(); ++k) {
    if (nv[k].engine_amax != 1) engine[index[(*items)[k].global_amax]] = 0;
  }
  if (amax.empty()) return absl::OkStatus();
  const int64_t n = static_cast<int64_t>(amax.size());
  REFIT_RETURN_IF_ERROR(Cuda(
      cudaMalloc(&tables_, static_cast<size_t>(n) * cuda::kPullNvfp4TableBytes),
      "cudaMalloc of NVFP4 threshold tables"));
  // Computed amaxes: one per (sender, parameter, leading index), which
  // tables of several records of the parameter (vLLM's fused q/k/v) share.
  std::map<std::tuple<int32_t, int32_t, std::vector<int64_t>>, int64_t> entry_of;
  std::vector<int64_t> entry(n, -1);
  std::vector<float*> scale2(n, nullptr);
  for (size_t k = 0; k < items->size(); ++k) {
    const FusedItem& it = nv[k];
    const int64_t t = index[(*items)[k].global_amax];
    if (engine[t] == 0) continue;
    const std::vector<int64_t> lead(it.where.begin(),
                                    it.where.end() - std::min<size_t>(2, it.where.size()));
    auto [e, fresh] = entry_of.emplace(std::make_tuple(it.src_rank, it.amax_group, lead),
                                       static_cast<int64_t>(entry_of.size()));
    if (fresh) engine_names_.push_back(slice.src.tensors[it.tensor].name);
    if (entry[t] >= 0 && entry[t] != e->second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", slice.src.tensors[it.tensor].name, ": the items of one NVFP4 global amax "
          "of trainer rank ", it.src_rank, " name two parameters (the members hold different "
          "plans)"));
    }
    entry[t] = e->second;
    if (it.scale2_buffer >= 0) {
      auto from = src.find(it.src_rank);
      if (from == src.end() || it.scale2_buffer >= static_cast<int32_t>(from->second.size()) ||
          from->second[it.scale2_buffer] == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", slice.src.tensors[it.tensor].name, ": the NVFP4 global scale buffer #",
            it.scale2_buffer, " of trainer rank ", it.src_rank, " is not mapped"));
      }
      scale2[t] = reinterpret_cast<float*>(from->second[it.scale2_buffer] + it.global_offset);
    }
  }
  const int64_t ne = static_cast<int64_t>(entry_of.size());
  if (ne > 0) {
    // f32 amax (NaN until the first round), u32 seen (0), int changed.
    REFIT_RETURN_IF_ERROR(Cuda(cudaMalloc(&engine_state_, static_cast<size_t>(ne) * 12),
                               "cudaMalloc of NVFP4 amaxes"));
    REFIT_RETURN_IF_ERROR(Cuda(cudaMemset(engine_state_, 0xFF, ne * 4), "cudaMemset"));
    REFIT_RETURN_IF_ERROR(
        Cuda(cudaMemset(static_cast<char*>(engine_state_) + ne * 4, 0, ne * 8), "cudaMemset"));
  }
  float* own = static_cast<float*>(engine_state_);
  unsigned int* seen = reinterpret_cast<unsigned int*>(own + ne);
  int* changed = reinterpret_cast<int*>(seen + ne);
  std::vector<cuda::PullNvfp4EngineAmax> entries;
  for (int64_t e = 0; e < ne; ++e) entries.push_back({own + e, seen + e, changed + e});
  std::vector<cuda::PullNvfp4EngineTable> rebuild;
  std::vector<const float*> read = amax;  // where each table's amax is read
  for (int64_t t = 0; t < n; ++t) {
    if (entry[t] < 0) continue;
    const int64_t e = entry[t];
    rebuild.push_back({own + e, changed + e, const_cast<float*>(amax[t]), scale2[t], t});
    read[t] = own + e;
  }
  for (cuda::PullNvfp4Item& it : *items) {
    const int64_t t = index[it.global_amax];
    it.table = static_cast<char*>(tables_) + t * cuda::kPullNvfp4TableBytes;
    if (entry[t] < 0) continue;
    it.global_amax = own + entry[t];
    it.seen = seen + entry[t];
    it.changed = changed + entry[t];
  }
  REFIT_RETURN_IF_ERROR(Upload(read.data(), read.size() * sizeof(read[0]), &table_amax_));
  REFIT_RETURN_IF_ERROR(Upload(entries.data(), entries.size() * sizeof(entries[0]), &engine_));
  REFIT_RETURN_IF_ERROR(Upload(rebuild.data(), rebuild.size() * sizeof(rebuild[0]), &rebuild_));
  changed_ = changed;
  num_tables_ = n;
  num_engine_ = ne;
  num_rebuild_ = static_cast<int64_t>(rebuild.size());
  return absl::OkStatus();
}

FusedPullDevice::~FusedPullDevice() {
  if (tables_ != nullptr) (void)cudaFree(tables_);
  if (table_amax_ != nullptr) (void)cudaFree(table_amax_);
  if (engine_state_ != nullptr) (void)cudaFree(engine_state_);
  if (engine_ != nullptr) (void)cudaFree(engine_);
  if (rebuild_ != nullptr) (void)cudaFree(rebuild_);
  if (quant_ != nullptr) (void)cudaFree(quant_);
  if (nv_ != nullptr) (void)cudaFree(nv_);
  if (bad_ != nullptr) (void)cudaFree(bad_);
}

absl::Status FusedPullDevice::Launch(void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  long long* bad = static_cast<long long*>(bad_);
  REFIT_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(bad, 0x7F, 24, st), "cudaMemsetAsync"));
  REFIT_RETURN_IF_ERROR(Cuda(
      static_cast<cudaError_t>(cuda::LaunchPullQuantize(
          static_cast<const cuda::PullQuantItem*>(quant_), num_quant_, bad, st)),
      "quantize-on-pull kernel launch"));
  const float* const* amax = static_cast<const float* const*>(table_amax_);
  const auto* nv = static_cast<const cuda::PullNvfp4Item*>(nv_);
  REFIT_RETURN_IF_ERROR(Cuda(static_cast<cudaError_t>(cuda::LaunchPullNvfp4Tables(
                                 amax, num_tables_, tables_, st)),
                             "NVFP4 threshold tables launch"));
  REFIT_RETURN_IF_ERROR(
      Cuda(static_cast<cudaError_t>(cuda::LaunchPullNvfp4(nv, num_nv_, bad + 1, st)),
           "NVFP4 quantize-on-pull kernel launch"));
  if (num_engine_ == 0) return absl::OkStatus();
  // The amaxes computed in that pass: compared, published, and the items
  // of those that changed run again with their new tables.
  REFIT_RETURN_IF_ERROR(Cuda(static_cast<cudaError_t>(cuda::LaunchPullNvfp4EngineAmax(
                                 static_cast<const cuda::PullNvfp4EngineAmax*>(engine_),
                                 num_engine_, bad + 2, st)),
                             "NVFP4 global amax launch"));
  REFIT_RETURN_IF_ERROR(Cuda(static_cast<cudaError_t>(cuda::LaunchPullNvfp4Rebuild(
                                 static_cast<const cuda::PullNvfp4EngineTable*>(rebuild_),
                                 num_rebuild_, tables_, st)),
                             "NVFP4 threshold tables launch"));
  return Cuda(static_cast<cudaError_t>(cuda::LaunchPullNvfp4Redo(nv, num_nv_, bad + 1, st)),
              "NVFP4 requantization launch");
}

absl::Status FusedPullDevice::Check(int32_t rank) const {
  long long bad[3] = {0, 0, 0};
  REFIT_RETURN_IF_ERROR(
      Cuda(cudaMemcpy(bad, bad_, 24, cudaMemcpyDeviceToHost), "the non-finite flags"));
  if (num_engine_ > 0) {
    std::vector<int> changed(num_engine_);
    REFIT_RETURN_IF_ERROR(Cuda(cudaMemcpy(changed.data(), changed_, num_engine_ * 4,
                                          cudaMemcpyDeviceToHost),
                               "the changed amaxes"));
    last_changed_ = 0;
    for (int c : changed) last_changed_ += c != 0;
  }
  int64_t k = -1;
  if (bad[0] >= 0 && bad[0] < num_quant_) {
    k = bad[0];
  } else if (bad[1] >= 0 && bad[1] < num_nv_) {
    k = num_quant_ + bad[1];
  }
  if (k < 0 && bad[2] >= 0 && bad[2] < num_engine_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine rank ", rank, ": tensor ", engine_names_[bad[2]],
        ": every value of its NVFP4 parameter is zero; its global scale amax / 2688 would be "
        "0, which ModelOpt's quantization divides by"));
  }
  if (k < 0) return absl::OkStatus();
  const auto& [name, where] = where_[k];
  return absl::InvalidArgumentError(absl::StrCat(
      "engine rank ", rank, ": tensor ", name, ": non-finite value in the region at [",
      absl::StrJoin(where, ", "), "] (quantize-on-pull of the trainer's weights)"));
}

}  // namespace refit
