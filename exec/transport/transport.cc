// The transports' argument rule (see transport.h).
#include "exec/transport/transport.h"

#include "absl/strings/str_cat.h"

namespace refit {
namespace {

absl::Status CheckPeer(int32_t rank, int32_t world_size, int32_t peer, const char* what) {
  if (peer < 0 || peer >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, ": ", what, " peer ", peer,
                                                   " out of range [0, ", world_size, ")"));
  }
  if (peer == rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, ": ", what, " peer ", peer, " is this rank"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLane(int32_t rank, int32_t lane, int32_t num_lanes) {
  if (lane < 0 || lane >= num_lanes) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, ": lane ", lane,
                                                   " out of range [0, ", num_lanes, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckWaveArguments(int32_t rank, int32_t world_size, int32_t num_lanes,
                                 int32_t lane, absl::Span<const SendOp> sends,
                                 absl::Span<const RecvOp> recvs) {
  if (absl::Status s = CheckLane(rank, lane, num_lanes); !s.ok()) return s;
  for (const SendOp& op : sends) {
    if (absl::Status s = CheckPeer(rank, world_size, op.peer, "send"); !s.ok()) return s;
  }
  for (const RecvOp& op : recvs) {
    if (absl::Status s = CheckPeer(rank, world_size, op.peer, "recv"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace refit
