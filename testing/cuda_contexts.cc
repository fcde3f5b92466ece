// CudaContexts: driver contexts through the runtime's driver entry points.
#include "testing/cuda_contexts.h"

#include <cuda.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace refit {
namespace testing {
namespace {

// The driver calls used here, at the ABI of CUDA 12.0 (cuCtxCreate_v2).
struct Driver {
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*ctx_create)(CUcontext*, unsigned int, CUdevice) = nullptr;
  CUresult (*ctx_destroy)(CUcontext) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*memcpy_peer_async)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t,
                                CUstream) = nullptr;
  absl::Status status;
};

template <typename F>
absl::Status Load(const char* name, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr) {
    return absl::UnavailableError(absl::StrCat("CUDA driver entry point ", name, ": ",
                                               cudaGetErrorString(e)));
  }
  *fn = reinterpret_cast<F>(p);
  return absl::OkStatus();
}

const Driver& TheDriver() {
  static const Driver* d = [] {
    auto* x = new Driver;
    absl::Status s = Load("cuDeviceGet", &x->device_get);
    if (s.ok()) s = Load("cuCtxCreate", &x->ctx_create);
    if (s.ok()) s = Load("cuCtxDestroy", &x->ctx_destroy);
    if (s.ok()) s = Load("cuCtxSetCurrent", &x->ctx_set_current);
    if (s.ok()) s = Load("cuCtxGetCurrent", &x->ctx_get_current);
    if (s.ok()) s = Load("cuMemcpyPeerAsync", &x->memcpy_peer_async);
    x->status = s;
    return x;
  }();
  return *d;
}

absl::Status DriverStatus(CUresult r, const std::string& what) {
  if (r == CUDA_SUCCESS) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": CUDA driver error ", static_cast<int>(r)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaContexts>> CudaContexts::Create(int32_t device, int32_t n) {
  // The runtime initializes the driver (and fails without a device).
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    return absl::UnavailableError(absl::StrCat("no CUDA device ", device));
  }
  const Driver& d = TheDriver();
  REFIT_RETURN_IF_ERROR(d.status);
  CUdevice dev = 0;
  REFIT_RETURN_IF_ERROR(DriverStatus(d.device_get(&dev, device), "cuDeviceGet"));
  std::unique_ptr<CudaContexts> c(new CudaContexts());
  CUcontext saved = nullptr;
  d.ctx_get_current(&saved);
  for (int32_t i = 0; i < n; ++i) {
    CUcontext ctx = nullptr;
    const CUresult r = d.ctx_create(&ctx, 0, dev);
    d.ctx_set_current(saved);  // cuCtxCreate makes the new one current
    REFIT_RETURN_IF_ERROR(DriverStatus(r, absl::StrCat("cuCtxCreate on device ", device)));
    c->contexts_.push_back(ctx);
  }
  return c;
}

CudaContexts::~CudaContexts() {
  for (void* ctx : contexts_) TheDriver().ctx_destroy(static_cast<CUcontext>(ctx));
}

absl::Status CudaContexts::Use(int32_t i) const {
  if (i < 0 || i >= static_cast<int32_t>(contexts_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no CUDA context ", i));
  }
  return SetCurrentCudaContext(contexts_[i]);
}

void* CudaContexts::context(int32_t i) const {
  if (i < 0 || i >= static_cast<int32_t>(contexts_.size())) return nullptr;
  return contexts_[i];
}

void* CurrentCudaContext() {
  const Driver& d = TheDriver();
  CUcontext ctx = nullptr;
  if (d.status.ok()) d.ctx_get_current(&ctx);
  return ctx;
}

absl::Status SetCurrentCudaContext(void* context) {
  const Driver& d = TheDriver();
  REFIT_RETURN_IF_ERROR(d.status);
  return DriverStatus(d.ctx_set_current(static_cast<CUcontext>(context)), "cuCtxSetCurrent");
}

absl::Status CopyAcrossContexts(void* dst, void* dst_context, const void* src, void* src_context,
                                int64_t bytes, cudaStream_t stream) {
  const Driver& d = TheDriver();
  REFIT_RETURN_IF_ERROR(d.status);
  return DriverStatus(
      d.memcpy_peer_async(reinterpret_cast<CUdeviceptr>(dst), static_cast<CUcontext>(dst_context),
                          reinterpret_cast<CUdeviceptr>(src), static_cast<CUcontext>(src_context),
                          static_cast<size_t>(bytes), reinterpret_cast<CUstream>(stream)),
      "cuMemcpyPeerAsync");
}

}  // namespace testing
}  // namespace refit
