// Sharing device buffers between the processes of one host, for the
// colocated data plane (pull_runner.h): a sender describes its buffers once
// (MemoryExporter), a receiver maps them once (MemoryImporter) and reads
// them in place from then on.
//
// Two kinds of memory are shared:
//   - cudaMalloc allocations (PyTorch's caching allocator by default):
//     a CUDA IPC handle of the allocation, opened with
//     cudaIpcOpenMemHandle;
//   - cuMem (virtual memory management) mappings: PyTorch's
//     expandable_segments, vLLM's sleep-mode allocator. A buffer may span
//     several mappings; each mapping's allocation is exported as a POSIX
//     file descriptor (cuMemExportToShareableHandle), which the receiver
//     takes from the sender with pidfd_getfd, imports
//     (cuMemImportFromShareableHandle) and maps, all of a buffer's pieces
//     side by side in one reserved range, readable by its own device
//     (cuMemSetAccess). The allocation must have been created with
//     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR among its requestedHandleTypes.
// Anything else (cudaMallocAsync pools, host memory, an allocation without
// a shareable handle type) is refused with FAILED_PRECONDITION naming the
// address. The driver API is reached through cudaGetDriverEntryPoint: no
// link against libcuda.
//
// A receiver in the sender's own process (two members as threads) reads the
// sender's addresses directly. Mappings stay until the importer is
// destroyed, so the memory of a sender that died stays valid for reads
// already queued (CUDA keeps imported memory alive while it is mapped).
#ifndef REFIT_EXEC_PULL_CUDA_PULL_MEMORY_H_
#define REFIT_EXEC_PULL_CUDA_PULL_MEMORY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace refit {

// An identifier of this process, the same for every thread, different from
// any other process's (pid and a random number): tells a receiver that the
// sender shares its address space.
uint64_t ProcessToken();

class MemoryExporter {
 public:
  MemoryExporter() = default;
  ~MemoryExporter();  // closes the exported file descriptors
  MemoryExporter(const MemoryExporter&) = delete;
  MemoryExporter& operator=(const MemoryExporter&) = delete;

  // Appends the description of device memory [p, p + bytes) to *out (for
  // MemoryImporter::Import in a process of this host). FAILED_PRECONDITION
  // naming the address for memory that cannot be shared (see above),
  // UNAVAILABLE if the driver entry points are missing.
  absl::Status Export(const void* p, int64_t bytes, std::string* out);

 private:
  // One shared allocation (cudaMalloc) or mapping (cuMem), as described
  // to receivers.
  struct Piece {
    uint32_t kind = 0;
    int32_t fd = -1;
    uint64_t base = 0;
    uint64_t size = 0;
    char ipc[64] = {};  // cudaIpcMemHandle_t
  };
  absl::StatusOr<const Piece*> PieceAt(uintptr_t a);
  std::map<uintptr_t, std::unique_ptr<Piece>> pieces_;  // by base address
};

class MemoryImporter {
 public:
  // Imports into CUDA device `device`.
  explicit MemoryImporter(int device) : device_(device) {}
  ~MemoryImporter();  // unmaps and closes everything imported
  MemoryImporter(const MemoryImporter&) = delete;
  MemoryImporter& operator=(const MemoryImporter&) = delete;

  // Maps the buffer described at (*data, *size) (one MemoryExporter::Export
  // entry, consumed from the front) of process `pid` with token `token`,
  // and returns its address in this process. `who` names the sender in
  // errors. INVALID_ARGUMENT for a malformed description, UNAVAILABLE when
  // the memory cannot be opened or mapped (naming the sender and the CUDA
  // or system error), PERMISSION_DENIED when pidfd_getfd is not allowed.
  absl::StatusOr<char*> Import(const char** data, size_t* size, int64_t pid,
                               uint64_t token, const std::string& who);

 private:
  struct Mapping {
    uint64_t va = 0;
    uint64_t size = 0;
    std::vector<unsigned long long> handles;  // CUmemGenericAllocationHandle
  };
  int device_ = 0;
  std::map<std::string, char*> ipc_opened_;  // IPC handle bytes -> base
  // (pid, sender range base, range end) -> mapping of that range.
  std::map<std::tuple<int64_t, uint64_t, uint64_t>, Mapping> mapped_;
  std::map<std::pair<int64_t, int>, int> fds_;  // (pid, sender fd) -> our fd
  bool peer_enabled_ = false;
};

}  // namespace refit

#endif  // REFIT_EXEC_PULL_CUDA_PULL_MEMORY_H_
