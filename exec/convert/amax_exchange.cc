// AmaxExchangeOver (see amax_exchange.h).
#include "exec/convert/amax_exchange.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace refit {
namespace {

using Amaxes = std::map<int32_t, std::vector<float>>;

// The exchange's steps; `held` collects what was allocated from `memory`.
absl::StatusOr<Amaxes> Exchange(const ConversionStage& stage, Transport* transport,
                                Copier* copier, const ConversionStage::Memory& memory,
                                const Amaxes& sends, absl::Time deadline,
                                std::vector<std::pair<char*, int64_t>>* held) {
  std::vector<SendOp> so;
  std::vector<RecvOp> ro;
  for (const auto& [peer, count] : stage.peers()) {
    const int64_t bytes = count * 4;
    REFIT_ASSIGN_OR_RETURN(char* sp, memory.allocate(bytes));
    held->emplace_back(sp, bytes);
    REFIT_ASSIGN_OR_RETURN(char* rp, memory.allocate(bytes));
    held->emplace_back(rp, bytes);
    auto it = sends.find(peer);
    if (it == sends.end() || static_cast<int64_t>(it->second.size()) != count) {
      return absl::InternalError(absl::StrCat("no ", count, " amaxes for trainer rank ", peer));
    }
    REFIT_RETURN_IF_ERROR(copier->FromHost(sp, it->second.data(), bytes));
    so.push_back({peer, sp, bytes});
    ro.push_back({peer, rp, bytes});
  }
  REFIT_RETURN_IF_ERROR(copier->Sync(0, deadline));
  REFIT_RETURN_IF_ERROR(transport->StartWave(0, so, ro, deadline));
  REFIT_RETURN_IF_ERROR(transport->WaitWave(0, deadline));
  Amaxes received;
  for (const RecvOp& r : ro) {
    std::vector<float>& v = received[r.peer];
    v.resize(r.bytes / 4);
    REFIT_RETURN_IF_ERROR(copier->ToHost(v.data(), static_cast<const char*>(r.ptr), r.bytes));
  }
  return received;
}

}  // namespace

ConversionStage::AmaxExchange AmaxExchangeOver(const ConversionStage* stage,
                                               Transport* transport, Copier* copier,
                                               const ConversionStage::Memory* memory,
                                               int32_t trainer_rank, absl::Time deadline) {
  return [=](const Amaxes& sends) -> absl::StatusOr<Amaxes> {
    std::vector<std::pair<char*, int64_t>> held;
    absl::StatusOr<Amaxes> r =
        Exchange(*stage, transport, copier, *memory, sends, deadline, &held);
    for (const auto& [p, bytes] : held) memory->release(p, bytes);
    if (!r.ok()) {
      return AnnotateStatus(r.status(), absl::StrCat("trainer rank ", trainer_rank,
                                                     ": exchanging FP8 tile amaxes"));
    }
    return r;
  };
}

}  // namespace refit
