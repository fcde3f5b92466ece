// SubsetTransport: a transport among some of a plan's members, addressed by
// global ranks. A membership that mixes data planes (same-host pairs on the
// pull path, the others over NCCL) connects only the members with a
// network pair: NCCL refuses two ranks on one GPU, which colocated members
// are. The inner transport is created over those members (its rank r is
// members[r]); this one translates the executor's global ranks.
#ifndef REFIT_EXEC_TRANSPORT_SUBSET_TRANSPORT_H_
#define REFIT_EXEC_TRANSPORT_SUBSET_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "exec/transport/transport.h"

namespace refit {

class SubsetTransport : public Transport {
 public:
  // `members`: global ranks, strictly ascending, of the inner transport's
  // ranks; `global_world` the plan's global world. INVALID_ARGUMENT naming
  // the value when members are not ascending, lie outside the world, or
  // the inner transport's world is not members.size().
  static absl::StatusOr<std::unique_ptr<SubsetTransport>> Create(
      std::unique_ptr<Transport> inner, std::vector<int32_t> members,
      int32_t global_world);

  int32_t rank() const override { return members_[inner_->rank()]; }
  int32_t world_size() const override { return global_world_; }
  int32_t num_lanes() const override { return inner_->num_lanes(); }
  MemoryKind memory_kind() const override { return inner_->memory_kind(); }
  // The inner transport's (its error annotated as WaitWave's), after
  // translating peers; INVALID_ARGUMENT naming the peer when it is not one
  // of the members.
  absl::Status StartWave(int32_t lane, absl::Span<const SendOp> sends,
                          absl::Span<const RecvOp> recvs, absl::Time deadline) override;
  // The inner transport's; an error (which names inner ranks) gets which
  // global rank each inner rank is.
  absl::Status WaitWave(int32_t lane, absl::Time deadline) override;
  void Cancel(const absl::Status& reason) override { inner_->Cancel(reason); }
  int32_t max_waves_per_lane() const override { return inner_->max_waves_per_lane(); }

 private:
  SubsetTransport() = default;
  // The inner rank of global rank `g`, or -1.
  int32_t Inner(int32_t g) const;
  // `s` with the inner ranks' global ranks appended (OK stays OK).
  absl::Status Annotate(absl::Status s) const;

  std::unique_ptr<Transport> inner_;
  std::vector<int32_t> members_;
  int32_t global_world_ = 0;
};

}  // namespace refit

#endif  // REFIT_EXEC_TRANSPORT_SUBSET_TRANSPORT_H_
