// CopyEngine's default transform and the host copy engine.
#include "exec/copy_engine.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "exec/transform.h"

namespace refit {
namespace {

class HostCopyEngine : public CopyEngine {
 public:
  MemoryKind kind() const override { return MemoryKind::kHost; }
  absl::StatusOr<char*> Allocate(int64_t bytes) override {
    void* p = std::aligned_alloc(64, ((std::max<int64_t>(bytes, 1) + 63) / 64) * 64);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes of host staging"));
    }
    return static_cast<char*>(p);
  }
  void Free(char* p) override { std::free(p); }
  absl::Status Copy(int32_t, absl::Span<const ResolvedCopy> copies) override {
    RunCopiesHost(copies);
    return absl::OkStatus();
  }
  absl::Status Sync(int32_t, absl::Time) override { return absl::OkStatus(); }
  absl::Status ToHost(void* dst, const char* src, int64_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status ApplyTransform(int32_t, Transform t, DType dtype, char* p,
                              int64_t elements) override {
    return ApplyTransformHost(t, dtype, p, elements);
  }
};

}  // namespace

absl::Status CopyEngine::ApplyTransform(int32_t, Transform t, DType, char*,
                                        int64_t) {
  return absl::FailedPreconditionError(absl::StrCat(
      "this copy engine cannot apply transform ", TransformName(t)));
}

std::unique_ptr<CopyEngine> MakeHostCopyEngine() {
  return std::make_unique<HostCopyEngine>();
}

}  // namespace refit
