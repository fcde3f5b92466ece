// CountingCopier: a Copier that forwards to another and counts the
// memory taken from it, so tests can compare a data plane's reported peak
// staging with what it really allocated.
#ifndef REFIT_TESTING_COUNTING_COPIER_H_
#define REFIT_TESTING_COUNTING_COPIER_H_

#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "exec/convert/copier.h"

namespace refit::testing {

class CountingCopier : public Copier {
 public:
  // Counts what `inner` allocates (MakeHostCopier() when null).
  explicit CountingCopier(std::unique_ptr<Copier> inner = nullptr);

  // Returns the bytes allocated and not yet freed.
  int64_t held_bytes() const;
  // Returns the most bytes held at once since creation.
  int64_t peak_bytes() const;

  MemoryKind kind() const override { return inner_->kind(); }
  absl::StatusOr<char*> Allocate(int64_t bytes) override;
  void Free(char* p) override;
  absl::Status Copy(int32_t lane, absl::Span<const ResolvedCopy> copies) override {
    return inner_->Copy(lane, copies);
  }
  absl::Status Sync(int32_t lane, absl::Time deadline) override {
    return inner_->Sync(lane, deadline);
  }
  absl::Status ToHost(void* dst, const char* src, int64_t bytes) override {
    return inner_->ToHost(dst, src, bytes);
  }
  bool OrderedWithTransport() const override { return inner_->OrderedWithTransport(); }
  absl::Status FromHost(char* dst, const void* src, int64_t bytes) override {
    return inner_->FromHost(dst, src, bytes);
  }
  std::unique_ptr<ConvertOps> MakeConvertOps(int32_t lane) override {
    return inner_->MakeConvertOps(lane);
  }

 private:
  std::unique_ptr<Copier> inner_;
  mutable absl::Mutex mu_;
  std::map<char*, int64_t> sizes_ ABSL_GUARDED_BY(mu_);
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace refit::testing

#endif  // REFIT_TESTING_COUNTING_COPIER_H_
