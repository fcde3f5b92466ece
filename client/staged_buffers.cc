// StagedBuffers (see staged_buffers.h).
#include "client/staged_buffers.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace refit {

int64_t StagingBudget(int64_t budget_bytes, double budget_share, int64_t weight_bytes) {
  if (budget_bytes >= 0) return budget_bytes;
  return budget_share >= 1 ? -1 : static_cast<int64_t>(budget_share * weight_bytes);
}
namespace {

class HostMemory : public StagingMemory {
 public:
  absl::StatusOr<char*> Allocate(int64_t bytes, bool fast) override {
    (void)fast;
    const size_t n = static_cast<size_t>((bytes + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, n == 0 ? 64 : n);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes of host staging"));
    }
    return static_cast<char*>(p);
  }
  void Free(char* p, bool fast) override {
    (void)fast;
    std::free(p);
  }
  absl::Status Copy(char* dst, const char* src, int64_t bytes) override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status Sync(absl::Time deadline) override {
    (void)deadline;
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<StagingMemory> HostStagingMemory() { return std::make_unique<HostMemory>(); }

absl::StatusOr<std::unique_ptr<StagedBuffers>> StagedBuffers::Create(
    std::vector<char*> live, std::vector<int64_t> bytes, std::unique_ptr<StagingMemory> memory,
    int64_t fast_budget, absl::Time deadline) {
  if (live.size() != bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "staging: ", live.size(), " buffers but ", bytes.size(), " sizes"));
  }
  if (memory == nullptr) return absl::InvalidArgumentError("staging: no memory given");
  std::unique_ptr<StagedBuffers> s(new StagedBuffers());
  s->memory_ = std::move(memory);
  s->live_ = std::move(live);
  s->bytes_ = std::move(bytes);
  s->staging_.assign(s->live_.size(), nullptr);
  s->fast_.assign(s->live_.size(), false);
  for (size_t i = 0; i < s->live_.size(); ++i) {
    if (s->live_[i] == nullptr) continue;
    if (s->bytes_[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("staging: buffer ", i, " has ", s->bytes_[i], " bytes"));
    }
    const bool fast = StagedFast(fast_budget, s->fast_bytes_, s->bytes_[i]);
    REFIT_ASSIGN_OR_RETURN(s->staging_[i], s->memory_->Allocate(s->bytes_[i], fast));
    s->fast_[i] = fast;
    (fast ? s->fast_bytes_ : s->overflow_bytes_) += s->bytes_[i];
  }
  REFIT_RETURN_IF_ERROR(s->Reset(deadline));
  return s;
}

StagedBuffers::~StagedBuffers() {
  for (size_t i = 0; i < staging_.size(); ++i) {
    if (staging_[i] != nullptr) memory_->Free(staging_[i], fast_[i]);
  }
}

absl::Status StagedBuffers::CopyAll(bool to_live, absl::Time deadline) {
  for (size_t i = 0; i < live_.size(); ++i) {
    if (live_[i] == nullptr || bytes_[i] == 0) continue;
    REFIT_RETURN_IF_ERROR(to_live ? memory_->Copy(live_[i], staging_[i], bytes_[i])
                                  : memory_->Copy(staging_[i], live_[i], bytes_[i]));
  }
  return memory_->Sync(deadline);
}

absl::StatusOr<double> StagedBuffers::Apply(absl::Time deadline) {
  const absl::Time start = absl::Now();
  listed_ = false;
  REFIT_RETURN_IF_ERROR(CopyAll(/*to_live=*/true, deadline));
  return absl::ToDoubleSeconds(absl::Now() - start);
}

absl::Status StagedBuffers::Reset(absl::Time deadline) {
  listed_ = false;
  return CopyAll(/*to_live=*/false, deadline);
}

absl::StatusOr<bool> StagedBuffers::FindChanged(absl::Time deadline) {
  listed_ = false;
  std::vector<StagedPair> pairs;
  for (size_t i = 0; i < live_.size(); ++i) {
    if (live_[i] == nullptr || bytes_[i] == 0 || !fast_[i]) continue;
    pairs.push_back({live_[i], staging_[i], bytes_[i]});
  }
  REFIT_ASSIGN_OR_RETURN(const bool listed, memory_->FindChanged(pairs));
  if (!listed) return false;
  REFIT_RETURN_IF_ERROR(memory_->Sync(deadline));
  listed_ = true;
  return true;
}

absl::StatusOr<double> StagedBuffers::ApplyChanged(absl::Time deadline) {
  if (!listed_) {
    return absl::FailedPreconditionError(
        "staging: ApplyChanged without FindChanged listing the round");
  }
  const absl::Time start = absl::Now();
  listed_ = false;
  REFIT_RETURN_IF_ERROR(memory_->WriteChanged());
  for (size_t i = 0; i < live_.size(); ++i) {
    if (live_[i] == nullptr || bytes_[i] == 0 || fast_[i]) continue;
    REFIT_RETURN_IF_ERROR(memory_->Copy(live_[i], staging_[i], bytes_[i]));
  }
  REFIT_RETURN_IF_ERROR(memory_->Sync(deadline));
  return absl::ToDoubleSeconds(absl::Now() - start);
}

}  // namespace refit
