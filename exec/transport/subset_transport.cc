// SubsetTransport (see subset_transport.h).
#include "exec/transport/subset_transport.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace refit {

absl::StatusOr<std::unique_ptr<SubsetTransport>> SubsetTransport::Create(
    std::unique_ptr<Transport> inner, std::vector<int32_t> members,
    int32_t global_world) {
  if (inner == nullptr) return absl::InvalidArgumentError("inner transport is null");
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= global_world ||
        (i > 0 && members[i] <= members[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "members[", i, "] = ", members[i],
          ": members must be ascending global ranks below ", global_world));
    }
  }
  if (inner->world_size() != static_cast<int32_t>(members.size()) || inner->rank() < 0 ||
      inner->rank() >= inner->world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inner transport is rank ", inner->rank(), " of ", inner->world_size(), ", but ",
        members.size(), " members were given"));
  }
  std::unique_ptr<SubsetTransport> t(new SubsetTransport());
  t->inner_ = std::move(inner);
  t->members_ = std::move(members);
  t->global_world_ = global_world;
  return t;
}

int32_t SubsetTransport::Inner(int32_t g) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), g);
  if (it == members_.end() || *it != g) return -1;
  return static_cast<int32_t>(it - members_.begin());
}

absl::Status SubsetTransport::StartWave(int32_t lane, absl::Span<const SendOp> sends,
                                         absl::Span<const RecvOp> recvs,
                                         absl::Time deadline) {
  std::vector<SendOp> s(sends.begin(), sends.end());
  std::vector<RecvOp> r(recvs.begin(), recvs.end());
  for (SendOp& op : s) {
    const int32_t p = Inner(op.peer);
    if (p < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "send to global rank ", op.peer, ", which is not on this transport"));
    }
    op.peer = p;
  }
  for (RecvOp& op : r) {
    const int32_t p = Inner(op.peer);
    if (p < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "receive from global rank ", op.peer, ", which is not on this transport"));
    }
    op.peer = p;
  }
  return Annotate(inner_->StartWave(lane, s, r, deadline));
}

absl::Status SubsetTransport::WaitWave(int32_t lane, absl::Time deadline) {
  return Annotate(inner_->WaitWave(lane, deadline));
}

absl::Status SubsetTransport::Annotate(absl::Status s) const {
  if (s.ok()) return s;
  std::string ranks;
  const size_t shown = std::min<size_t>(members_.size(), 16);
  for (size_t i = 0; i < shown; ++i) {
    absl::StrAppend(&ranks, i == 0 ? "" : ", ", i, "=", members_[i]);
  }
  if (shown < members_.size()) absl::StrAppend(&ranks, ", ...");
  return absl::Status(s.code(), absl::StrCat(s.message(), " (ranks of the network transport "
                                                          "as global ranks: ",
                                             ranks, ")"));
}

}  // namespace refit
