// CudaLanes: a device transport's lanes as the CUDA copier sees them.
// NcclTransport implements it; MakeCudaCopier
// (cuda_copier.h) runs its copies on these streams.
#ifndef REFIT_EXEC_TRANSPORT_CUDA_CUDA_LANES_H_
#define REFIT_EXEC_TRANSPORT_CUDA_CUDA_LANES_H_

#include <cstdint>

#include "absl/status/status.h"

namespace refit {

// A device transport's lanes as the CUDA copier sees them: one CUDA
// stream per lane, and a check that fails once the transport was cancelled
// (so waits on those streams end promptly).
class CudaLanes {
 public:
  virtual ~CudaLanes() = default;
  virtual int32_t num_lanes() const = 0;
  // The lane's cudaStream_t (as void*), or null for a bad lane.
  virtual void* stream(int32_t lane) const = 0;
  // OK, or the reason the transport was cancelled (its lanes then taken
  // down, so nothing more runs on their streams).
  virtual absl::Status CheckCancelled() = 0;
};

}  // namespace refit

#endif  // REFIT_EXEC_TRANSPORT_CUDA_CUDA_LANES_H_
