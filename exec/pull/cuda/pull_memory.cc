// MemoryExporter / MemoryImporter (see pull_memory.h).
#include "exec/pull/cuda/pull_memory.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

namespace refit {
namespace {

constexpr uint32_t kIpcPiece = 1;   // cudaMalloc allocation, CUDA IPC handle
constexpr uint32_t kFdPiece = 2;    // cuMem mapping, POSIX fd

struct WireHeader {
  uint64_t address;
  int64_t bytes;
  uint32_t pieces;
  uint32_t reserved;
};

struct WirePiece {
  uint32_t kind;
  int32_t fd;
  uint64_t base;
  uint64_t size;
  char ipc[sizeof(cudaIpcMemHandle_t)];
};

static_assert(sizeof(cudaIpcMemHandle_t) == 64, "IPC handle size");

// The driver functions used, through the runtime (no link-time libcuda).
struct Driver {
  CUresult (*get_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  CUresult (*retain)(CUmemGenericAllocationHandle*, void*) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*export_handle)(void*, CUmemGenericAllocationHandle,
                            CUmemAllocationHandleType, unsigned long long) = nullptr;
  CUresult (*import_handle)(CUmemGenericAllocationHandle*, void*,
                            CUmemAllocationHandleType) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr,
                      unsigned long long) = nullptr;
  CUresult (*address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  bool ok = false;
};

template <typename F>
bool Load(const char* name, F* f) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) !=
          cudaSuccess ||
      q != cudaDriverEntryPointSuccess || p == nullptr) {
    (void)cudaGetLastError();
    return false;
  }
  *f = reinterpret_cast<F>(p);
  return true;
}

const Driver& D() {
  static const Driver d = [] {
    Driver x;
    x.ok = Load("cuMemGetAddressRange", &x.get_range) &&
           Load("cuMemRetainAllocationHandle", &x.retain) &&
           Load("cuMemRelease", &x.release) &&
           Load("cuMemExportToShareableHandle", &x.export_handle) &&
           Load("cuMemImportFromShareableHandle", &x.import_handle) &&
           Load("cuMemAddressReserve", &x.reserve) &&
           Load("cuMemAddressFree", &x.address_free) &&
           Load("cuMemMap", &x.map) && Load("cuMemUnmap", &x.unmap) &&
           Load("cuMemSetAccess", &x.set_access);
    return x;
  }();
  return d;
}

absl::Status DriverReady() {
  if (D().ok) return absl::OkStatus();
  return absl::UnavailableError(
      "the CUDA driver's memory-sharing entry points (cuMemGetAddressRange, "
      "cuMemExportToShareableHandle, ...) are not available");
}

std::string CuError(CUresult r) { return absl::StrCat("CUresult ", static_cast<int>(r)); }

}  // namespace

uint64_t ProcessToken() {
  static const uint64_t token = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
           (static_cast<uint64_t>(getpid()) << 40);
  }();
  return token;
}

MemoryExporter::~MemoryExporter() {
  for (auto& [base, p] : pieces_) {
    if (p->kind == kFdPiece && p->fd >= 0) close(p->fd);
  }
}

absl::StatusOr<const MemoryExporter::Piece*> MemoryExporter::PieceAt(uintptr_t a) {
  auto it = pieces_.upper_bound(a);
  if (it != pieces_.begin()) {
    --it;
    if (a >= it->first && a < it->first + it->second->size) return it->second.get();
  }
  const std::string where = absl::StrFormat("device memory at 0x%x", a);
  CUdeviceptr base = 0;
  size_t size = 0;
  if (D().get_range(&base, &size, static_cast<CUdeviceptr>(a)) != CUDA_SUCCESS) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, " is not a device allocation this process can name"));
  }
  auto p = std::make_unique<Piece>();
  p->base = static_cast<uint64_t>(base);
  p->size = static_cast<uint64_t>(size);
  CUmemGenericAllocationHandle h;
  if (D().retain(&h, reinterpret_cast<void*>(base)) == CUDA_SUCCESS) {
    // A cuMem mapping (expandable segments, a VMM allocator).
    int fd = -1;
    const CUresult r = D().export_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    (void)D().release(h);
    if (r != CUDA_SUCCESS) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, " is a cuMem allocation without a POSIX file descriptor "
          "handle type (", CuError(r), "): create it with "
          "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in requestedHandleTypes"));
    }
    p->kind = kFdPiece;
    p->fd = fd;
    // Receivers take the descriptor with pidfd_getfd, which Yama's
    // ptrace_scope=1 allows only to a process this one names.
    (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  } else {
    cudaIpcMemHandle_t ih;
    const cudaError_t e = cudaIpcGetMemHandle(&ih, reinterpret_cast<void*>(base));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::FailedPreconditionError(absl::StrCat(
          where, " cannot be shared with another process (", cudaGetErrorString(e),
          "): it must come from cudaMalloc or a cuMem allocation with a POSIX "
          "file descriptor handle type (cudaMallocAsync pools cannot be shared)"));
    }
    p->kind = kIpcPiece;
    std::memcpy(p->ipc, &ih, sizeof(ih));
  }
  const Piece* out = p.get();
  pieces_[static_cast<uintptr_t>(base)] = std::move(p);
  return out;
}

absl::Status MemoryExporter::Export(const void* p, int64_t bytes, std::string* out) {
  REFIT_RETURN_IF_ERROR(DriverReady());
  if (p == nullptr || bytes < 0) {
    return absl::InvalidArgumentError("cannot share a null or negative range");
  }
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::vector<WirePiece> pieces;
  uintptr_t at = a;
  do {
    REFIT_ASSIGN_OR_RETURN(const Piece* piece, PieceAt(at));
    if (!pieces.empty() && (piece->kind != kFdPiece || pieces.back().kind != kFdPiece)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "device memory at %p (%d bytes) spans several cudaMalloc allocations", p, bytes));
    }
    WirePiece w;
    std::memset(&w, 0, sizeof(w));
    w.kind = piece->kind;
    w.fd = piece->fd;
    w.base = piece->base;
    w.size = piece->size;
    std::memcpy(w.ipc, piece->ipc, sizeof(w.ipc));
    pieces.push_back(w);
    at = piece->base + piece->size;
  } while (at < a + static_cast<uintptr_t>(bytes));
  WireHeader h{static_cast<uint64_t>(a), bytes, static_cast<uint32_t>(pieces.size()), 0};
  out->append(reinterpret_cast<const char*>(&h), sizeof(h));
  out->append(reinterpret_cast<const char*>(pieces.data()), pieces.size() * sizeof(WirePiece));
  return absl::OkStatus();
}

MemoryImporter::~MemoryImporter() {
  (void)cudaSetDevice(device_);
  for (auto& [key, m] : mapped_) {
    if (m.va == 0) continue;
    (void)D().unmap(static_cast<CUdeviceptr>(m.va), m.size);
    for (unsigned long long h : m.handles) (void)D().release(h);
    (void)D().address_free(static_cast<CUdeviceptr>(m.va), m.size);
  }
  for (auto& [h, p] : ipc_opened_) (void)cudaIpcCloseMemHandle(p);
  for (auto& [k, fd] : fds_) close(fd);
  (void)cudaGetLastError();
}

absl::StatusOr<char*> MemoryImporter::Import(const char** data, size_t* size,
                                             int64_t pid, uint64_t token,
                                             const std::string& who) {
  REFIT_RETURN_IF_ERROR(DriverReady());
  WireHeader h;
  if (*size < sizeof(h)) return absl::InvalidArgumentError(who + ": truncated buffer description");
  std::memcpy(&h, *data, sizeof(h));
  const size_t need = sizeof(h) + static_cast<size_t>(h.pieces) * sizeof(WirePiece);
  if (h.pieces == 0 || h.pieces > (1u << 24) || *size < need) {
    return absl::InvalidArgumentError(who + ": malformed buffer description");
  }
  std::vector<WirePiece> pieces(h.pieces);
  std::memcpy(pieces.data(), *data + sizeof(h), h.pieces * sizeof(WirePiece));
  *data += need;
  *size -= need;
  const uint64_t end = h.address + static_cast<uint64_t>(h.bytes);
  if (h.address < pieces.front().base || end > pieces.back().base + pieces.back().size) {
    return absl::InvalidArgumentError(who + ": buffer outside its described memory");
  }
  if (token == ProcessToken()) {
    // The sender is a thread of this process: its address works as is,
    // once this device may reach the sender's (peer access).
    cudaPointerAttributes attr;
    if (!peer_enabled_ && cudaPointerGetAttributes(&attr, reinterpret_cast<void*>(h.address)) ==
                              cudaSuccess &&
        attr.type == cudaMemoryTypeDevice && attr.device != device_) {
      const cudaError_t e = cudaDeviceEnablePeerAccess(attr.device, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
        return absl::UnavailableError(absl::StrCat(
            who, ": device ", device_, " cannot reach device ", attr.device,
            " (peer access: ", cudaGetErrorString(e), ")"));
      }
      peer_enabled_ = true;
    }
    (void)cudaGetLastError();
    return reinterpret_cast<char*>(h.address);
  }
  if (pieces.front().kind == kIpcPiece) {
    const WirePiece& p = pieces.front();
    const std::string key(p.ipc, sizeof(p.ipc));
    auto it = ipc_opened_.find(key);
    if (it == ipc_opened_.end()) {
      cudaIpcMemHandle_t ih;
      std::memcpy(&ih, p.ipc, sizeof(ih));
      void* base = nullptr;
      const cudaError_t e = cudaIpcOpenMemHandle(&base, ih, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return absl::UnavailableError(absl::StrCat(
            who, ": cannot open its CUDA IPC memory handle: ", cudaGetErrorString(e),
            " (sender and receiver must be on one host)"));
      }
      it = ipc_opened_.emplace(key, static_cast<char*>(base)).first;
    }
    return it->second + (h.address - p.base);
  }
  // cuMem pieces: map them side by side, once per sender range.
  const auto key = std::make_tuple(pid, pieces.front().base,
                                   pieces.back().base + pieces.back().size);
  auto found = mapped_.find(key);
  if (found != mapped_.end()) {
    return reinterpret_cast<char*>(found->second.va + (h.address - pieces.front().base));
  }
  for (size_t i = 1; i < pieces.size(); ++i) {
    if (pieces[i].kind != kFdPiece || pieces[i].base != pieces[i - 1].base + pieces[i - 1].size) {
      return absl::InvalidArgumentError(who + ": buffer pieces are not contiguous");
    }
  }
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (pidfd < 0) {
    return absl::UnavailableError(absl::StrCat(who, ": pidfd_open(", pid,
                                               "): ", std::strerror(errno)));
  }
  Mapping& m = mapped_[key];
  m.size = std::get<2>(key) - std::get<1>(key);
  CUdeviceptr va = 0;
  CUresult r = D().reserve(&va, m.size, 0, 0, 0);
  absl::Status s;
  if (r != CUDA_SUCCESS) {
    s = absl::UnavailableError(absl::StrCat(who, ": cuMemAddressReserve of ", m.size,
                                            " bytes: ", CuError(r)));
  } else {
    m.va = static_cast<uint64_t>(va);
  }
  for (size_t i = 0; s.ok() && i < pieces.size(); ++i) {
    const WirePiece& p = pieces[i];
    auto fit = fds_.find({pid, p.fd});
    if (fit == fds_.end()) {
      const int fd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, p.fd, 0));
      if (fd < 0) {
        const int err = errno;
        const std::string msg = absl::StrCat(
            who, ": cannot take its cuMem file descriptor ", p.fd, " (pidfd_getfd: ",
            std::strerror(err), "); both processes must run as one user");
        s = err == EPERM ? absl::PermissionDeniedError(msg) : absl::UnavailableError(msg);
        break;
      }
      fit = fds_.emplace(std::make_pair(pid, p.fd), fd).first;
    }
    CUmemGenericAllocationHandle gh;
    r = D().import_handle(&gh, reinterpret_cast<void*>(static_cast<uintptr_t>(fit->second)),
                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) {
      s = absl::UnavailableError(absl::StrCat(who, ": cuMemImportFromShareableHandle: ",
                                              CuError(r)));
      break;
    }
    m.handles.push_back(gh);
    r = D().map(va + (p.base - pieces.front().base), p.size, 0, gh, 0);
    if (r != CUDA_SUCCESS) {
      s = absl::UnavailableError(absl::StrCat(who, ": cuMemMap: ", CuError(r)));
      break;
    }
  }
  close(pidfd);
  if (s.ok()) {
    CUmemAccessDesc acc;
    std::memset(&acc, 0, sizeof(acc));
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = device_;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = D().set_access(va, m.size, &acc, 1);
    if (r != CUDA_SUCCESS) {
      s = absl::UnavailableError(absl::StrCat(who, ": cuMemSetAccess for device ", device_,
                                              ": ", CuError(r)));
    }
  }
  if (!s.ok()) {
    // Unmap what was mapped; the destructor skips an empty entry.
    if (m.va != 0) {
      (void)D().unmap(va, m.size);
      for (unsigned long long gh : m.handles) (void)D().release(gh);
      (void)D().address_free(va, m.size);
    }
    mapped_.erase(key);
    return s;
  }
  return reinterpret_cast<char*>(m.va + (h.address - pieces.front().base));
}

}  // namespace refit
