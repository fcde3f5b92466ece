// Copier: staging memory and copies of one memory kind, which the
// executor packs and unpacks messages with; and the host copier.
#ifndef REFIT_EXEC_CONVERT_COPIER_H_
#define REFIT_EXEC_CONVERT_COPIER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "exec/convert/convert.h"
#include "exec/program/copy_program.h"
#include "exec/transport/transport.h"
#include "layout/dtype.h"

namespace refit {

// Staging memory and copies of one memory kind. The executor owns a host
// copier by default; GPU callers pass a device copier (its copies are
// ordered before the lane's next transport operation, e.g. on the lane's
// stream).
class Copier {
 public:
  virtual ~Copier() = default;
  virtual MemoryKind kind() const = 0;
  // Returns `bytes` of staging; RESOURCE_EXHAUSTED if it cannot.
  virtual absl::StatusOr<char*> Allocate(int64_t bytes) = 0;
  virtual void Free(char* p) = 0;
  // Runs copies for `lane`.
  virtual absl::Status Copy(int32_t lane,
                            absl::Span<const ResolvedCopy> copies) = 0;
  // Waits until every copy issued on `lane` is complete (DEADLINE_EXCEEDED
  // after `deadline`).
  virtual absl::Status Sync(int32_t lane, absl::Time deadline) = 0;
  // Copies `bytes` of (possibly device) memory at src to host memory dst.
  virtual absl::Status ToHost(void* dst, const char* src, int64_t bytes) = 0;
  // True when the copies of a lane are ordered with the transport's
  // operations of that lane (same CUDA stream): the executor then enqueues
  // pack -> wave -> unpack without waiting on the host, and waits only
  // before reusing a lane and at the end of Run().
  virtual bool OrderedWithTransport() const { return false; }
  // Copies `bytes` of host memory at src to (possibly device) memory dst.
  virtual absl::Status FromHost(char* dst, const void* src, int64_t bytes) = 0;
  // The conversion steps on this engine's memory (plan/conversion.h),
  // ordered with the copies of `lane` (a lane of the copier), or null when
  // it has none.
  virtual std::unique_ptr<ConvertOps> MakeConvertOps(int32_t lane) { return nullptr; }
};

// Returns the host copier: staging from aligned_alloc, copies with
// memcpy on the calling thread, Sync always OK, conversions on the host.
std::unique_ptr<Copier> MakeHostCopier();

}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_COPIER_H_
