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
  // NVFP4 global amaxes this receiver computes (engine_amax items, see
  // exec/pull/fused_pull.h): the items quantize with the previous round's
  // amax (none in the first round) and raise this round's; a small kernel
  // compares the two and writes the amax and global scale into the
  // trainer's scratch; the tables of changed amaxes are rebuilt and their
  // items run again. The bytes equal a pass with the right amax.
  // UNAVAILABLE with the CUDA error of a launch.
  absl::Status Launch(void* stream);

  // Once the stream has run them: INVALID_ARGUMENT naming engine rank
  // `rank`, the tensor and the region of an item that met a NaN or an
  // infinity (its bytes are unspecified), or the tensor whose computed
  // global amax is 0 (every value zero); UNAVAILABLE with a CUDA error.
  absl::Status Check(int32_t rank) const;

  // The global amaxes this receiver computes, and how many changed in the
  // last round Check saw (each changed one's items ran twice).
  int64_t num_engine_amaxes() const { return num_engine_; }
  int64_t last_changed() const { return last_changed_; }

 private:
  FusedPullDevice() = default;
  // One threshold table per distinct global amax of `items`, rebuilt by
  // Launch each round; sets each item's table.
  // `nv`: the FusedItems of `items` (which amaxes this receiver computes).
  absl::Status AddNvfp4Tables(const Plan& slice, const std::vector<FusedItem>& nv,
                              const std::map<int32_t, std::vector<char*>>& src,
                              std::vector<cuda::PullNvfp4Item>* items);
  void* quant_ = nullptr;  // cuda::PullQuantItem[num_quant_]
  int64_t num_quant_ = 0;
  void* nv_ = nullptr;  // cuda::PullNvfp4Item[num_nv_]
  int64_t num_nv_ = 0;
  void* bad_ = nullptr;  // long long[3]: the two kernels' flags, a zero amax
  void* tables_ = nullptr;      // num_tables_ NVFP4 threshold tables
  void* table_amax_ = nullptr;  // const float*[num_tables_]: their global amaxes
  int64_t num_tables_ = 0;
  // Computed amaxes, num_engine_ of them: f32 amax, u32 seen, int changed
  // each (engine_state_), their cuda::PullNvfp4EngineAmax (engine_), and
  // the tables built from them (cuda::PullNvfp4EngineTable, rebuild_).
  void* engine_state_ = nullptr;
  void* engine_ = nullptr;
  void* rebuild_ = nullptr;
  int* changed_ = nullptr;  // in engine_state_
  int64_t num_engine_ = 0, num_rebuild_ = 0;
  mutable int64_t last_changed_ = 0;
  std::vector<std::string> engine_names_;  // a tensor of each computed amax
  // Tensor name and region origin of item k: quant_'s, then nv_'s.
  std::vector<std::pair<std::string, std::vector<int64_t>>> where_;
};

}  // namespace refit

#endif  // REFIT_EXEC_PULL_CUDA_FUSED_PULL_DEVICE_H_
