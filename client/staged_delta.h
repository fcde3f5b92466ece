// StagedDeltaLog: what a staged host engine member's delta round changed,
// so that its apply writes only the changed words into the live buffers
// (the scatter), not every byte.
//
// The member's delta runner (exec/delta/delta_runner.h) applies each
// message's changed words into staging: where the message is one
// contiguous range of a buffer, in place; otherwise into the runner's own
// staging, which it then unpacks into the buffers. The log wraps the
// runner's codec steps and copier (WrapOps, WrapCopier): it keeps each
// applied message's header and payload and the unpack copies out of where
// it was applied, and maps every changed word to its address in a staged
// buffer, hence in the live one. A round in which any message came dense
// (DeltaRoundStats::dense_messages) is applied by a full copy instead.
//
// Host memory only (the codec's payloads are read on the host).
#ifndef REFIT_CLIENT_STAGED_DELTA_H_
#define REFIT_CLIENT_STAGED_DELTA_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "exec/convert/copier.h"
#include "exec/delta/delta_codec.h"
#include "exec/delta/wave_ops.h"
#include "exec/program/resolved_copy.h"

namespace refit {

class StagedDeltaLog {
 public:
  // Wraps `inner` so that the log sees its applies / its copies; the log
  // must outlive the wrappers.
  std::unique_ptr<DeltaWaveOps> WrapOps(std::unique_ptr<DeltaWaveOps> inner);
  std::unique_ptr<Copier> WrapCopier(std::unique_ptr<Copier> inner);

  // Forgets the round logged so far (call before each round).
  void Clear();
  // Messages logged since Clear.
  int64_t messages() const { return static_cast<int64_t>(entries_.size()); }

  // Writes every changed word of the logged round into the live buffers:
  // `staging[i]` (`bytes[i]` long, null: none) is the staged copy of
  // `live[i]`. Returns the words written. INTERNAL naming the message
  // when a changed word maps to no staged buffer (the live buffers may then
  // hold part of the round).
  absl::StatusOr<int64_t> ApplyToLive(const std::vector<char*>& staging,
                                      const std::vector<char*>& live,
                                      const std::vector<int64_t>& bytes) const;

  // The wrappers' hooks.
  void OnApply(absl::Span<const ApplyItem> items);
  void OnCopy(absl::Span<const ResolvedCopy> copies);

 private:
  struct Entry {
    DeltaHeader header;
    std::vector<uint8_t> payload;
    const char* target = nullptr;
    int64_t target_bytes = 0;
    std::vector<ResolvedCopy> unpack;  // copies out of [target, +target_bytes)
  };
  std::vector<Entry> entries_;
  // Entries applied outside the staged buffers whose range no later apply
  // reused yet, by target address.
  std::map<const char*, size_t> open_;
};

}  // namespace refit

#endif  // REFIT_CLIENT_STAGED_DELTA_H_
