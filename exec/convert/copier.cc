// The host copier.
#include "exec/convert/copier.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace refit {
namespace {

class HostCopier : public Copier {
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
  absl::Status FromHost(char* dst, const void* src, int64_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  std::unique_ptr<ConvertOps> MakeConvertOps(int32_t) override {
    return MakeHostConvertOps();
  }
};

}  // namespace

std::unique_ptr<Copier> MakeHostCopier() {
  return std::make_unique<HostCopier>();
}

}  // namespace refit
