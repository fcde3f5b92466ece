// FusedPullDevice (see fused_pull_device.h).
#include "exec/pull/cuda/fused_pull_device.h"

#include <cuda_runtime.h>

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
  REFIT_RETURN_IF_ERROR(d->AddNvfp4Tables(&n));
  REFIT_RETURN_IF_ERROR(Cuda(cudaMalloc(&d->bad_, 16), "cudaMalloc"));
  REFIT_RETURN_IF_ERROR(Upload(q.data(), q.size() * sizeof(q[0]), &d->quant_));
  REFIT_RETURN_IF_ERROR(Upload(n.data(), n.size() * sizeof(n[0]), &d->nv_));
  d->num_quant_ = static_cast<int64_t>(q.size());
  d->num_nv_ = static_cast<int64_t>(n.size());
  return d;
}

absl::Status FusedPullDevice::AddNvfp4Tables(std::vector<cuda::PullNvfp4Item>* items) {
  std::map<const float*, int64_t> index;
  std::vector<const float*> amax;
  for (const cuda::PullNvfp4Item& it : *items) {
    if (index.emplace(it.global_amax, static_cast<int64_t>(amax.size())).second) {
      amax.push_back(it.global_amax);
    }
  }
  if (amax.empty()) return absl::OkStatus();
  REFIT_RETURN_IF_ERROR(Cuda(
      cudaMalloc(&tables_, static_cast<size_t>(amax.size()) * cuda::kPullNvfp4TableBytes),
      "cudaMalloc of NVFP4 threshold tables"));
  REFIT_RETURN_IF_ERROR(Upload(amax.data(), amax.size() * sizeof(amax[0]), &table_amax_));
  num_tables_ = static_cast<int64_t>(amax.size());
  for (cuda::PullNvfp4Item& it : *items) {
    it.table = static_cast<char*>(tables_) + index[it.global_amax] * cuda::kPullNvfp4TableBytes;
  }
  return absl::OkStatus();
}

FusedPullDevice::~FusedPullDevice() {
  if (tables_ != nullptr) (void)cudaFree(tables_);
  if (table_amax_ != nullptr) (void)cudaFree(table_amax_);
  if (quant_ != nullptr) (void)cudaFree(quant_);
  if (nv_ != nullptr) (void)cudaFree(nv_);
  if (bad_ != nullptr) (void)cudaFree(bad_);
}

absl::Status FusedPullDevice::Launch(void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  long long* bad = static_cast<long long*>(bad_);
  REFIT_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(bad, 0x7F, 16, st), "cudaMemsetAsync"));
  REFIT_RETURN_IF_ERROR(Cuda(
      static_cast<cudaError_t>(cuda::LaunchPullQuantize(
          static_cast<const cuda::PullQuantItem*>(quant_), num_quant_, bad, st)),
      "quantize-on-pull kernel launch"));
  REFIT_RETURN_IF_ERROR(Cuda(static_cast<cudaError_t>(cuda::LaunchPullNvfp4Tables(
                                 static_cast<const float* const*>(table_amax_), num_tables_,
                                 tables_, st)),
                             "NVFP4 threshold tables launch"));
  return Cuda(static_cast<cudaError_t>(cuda::LaunchPullNvfp4(
                        static_cast<const cuda::PullNvfp4Item*>(nv_), num_nv_, bad + 1, st)),
                    "NVFP4 quantize-on-pull kernel launch");
}

absl::Status FusedPullDevice::Check(int32_t rank) const {
  long long bad[2] = {0, 0};
  REFIT_RETURN_IF_ERROR(
      Cuda(cudaMemcpy(bad, bad_, 16, cudaMemcpyDeviceToHost), "the non-finite flags"));
  int64_t k = -1;
  if (bad[0] >= 0 && bad[0] < num_quant_) {
    k = bad[0];
  } else if (bad[1] >= 0 && bad[1] < num_nv_) {
    k = num_quant_ + bad[1];
  }
  if (k < 0) return absl::OkStatus();
  const auto& [name, where] = where_[k];
  return absl::InvalidArgumentError(absl::StrCat(
      "engine rank ", rank, ": tensor ", name, ": non-finite value in the region at [",
      absl::StrJoin(where, ", "), "] (quantize-on-pull of the trainer's weights)"));
}

}  // namespace refit
