// CUDA runtime result codes -> absl::Status.
#include "exec/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace refit {

namespace {

std::string Message(cudaError_t e, const std::string& what) {
  return absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

}  // namespace

absl::Status CudaStatus(cudaError_t e, const std::string& what, absl::StatusCode code) {
  if (e == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  return absl::Status(code, Message(e, what));
}

absl::Status CudaStatus(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string msg = Message(e, what);
  switch (e) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::UnavailableError(msg);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace refit
