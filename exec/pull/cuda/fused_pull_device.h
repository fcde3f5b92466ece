// A receiver's quantize-on-pull items (exec/pull/fused_pull.h) on the device:
// the FP8 / MXFP8 items of LaunchPullQuantize (pull_quantize_kernels.h),
// NVFP4's of LaunchPullNvfp4 (pull_nvfp4_kernels.h), their non-finite
// flags, and what names an item in errors. The pull runner's receiver
// (pull_runner.h) holds one and launches it after its copies each round.
#ifndef REFIT_EXEC_PULL_CUDA_FUSED_PULL_DEVICE_H_
#define REFIT_EXEC_PULL_CUDA_FUSED_PULL_DEVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "exec/pull/cuda/pull_nvfp4_kernels.h"
#include "exec/pull/fused_pull.h"
#include "plan/plan.h"

namespace refit {

class FusedPullDevice {
 public:
  // The items of `quant` resolved to device addresses (src.at(rank)[b]:
  // sender `rank`'s buffer b of slice.src as mapped here; dst: this
  // receiver's buffers) and copied to the current device. INVALID_ARGUMENT
  // naming a missing buffer; UNAVAILABLE with the CUDA error.
  static absl::StatusOr<std::unique_ptr<FusedPullDevice>> Create(
      const Plan& slice, const FusedProgram& quant,
      const std::map<int32_t, std::vector<char*>>& src, absl::Span<char* const> dst);
  ~FusedPullDevice();
  FusedPullDevice(const FusedPullDevice&) = delete;
  FusedPullDevice& operator=(const FusedPullDevice&) = delete;

  int64_t num_items() const { return num_quant_ + num_nv_; }

  // Queues the flags' reset, the NVFP4 items' threshold tables (from this
  // round's global amaxes) and the kernels on `stream` (a cudaStream_t).
  // UNAVAILABLE with the CUDA error of a launch.
  absl::Status Launch(void* stream);

  // Once the stream has run them: INVALID_ARGUMENT naming engine rank
  // `rank`, the tensor and the region of an item that met a NaN or an
  // infinity (its bytes are unspecified); UNAVAILABLE with a CUDA error.
  absl::Status Check(int32_t rank) const;

 private:
  FusedPullDevice() = default;
  // One threshold table per distinct global amax of `items`, rebuilt by
  // Launch each round; sets each item's table.
  absl::Status AddNvfp4Tables(std::vector<cuda::PullNvfp4Item>* items);
  void* quant_ = nullptr;  // cuda::PullQuantItem[num_quant_]
  int64_t num_quant_ = 0;
  void* nv_ = nullptr;  // cuda::PullNvfp4Item[num_nv_]
  int64_t num_nv_ = 0;
  void* bad_ = nullptr;  // long long[2]: the two kernels' flags
  void* tables_ = nullptr;      // num_tables_ NVFP4 threshold tables
  void* table_amax_ = nullptr;  // const float*[num_tables_]: their global amaxes
  int64_t num_tables_ = 0;
  // Tensor name and region origin of item k: quant_'s, then nv_'s.
  std::vector<std::pair<std::string, std::vector<int64_t>>> where_;
};

}  // namespace refit

#endif  // REFIT_EXEC_PULL_CUDA_FUSED_PULL_DEVICE_H_
