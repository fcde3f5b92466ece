// PlaceMessage: where one side of a plan message lies in a rank's own
// buffers, the per-plan setup every runner over a transport does for each
// message it sends or receives (the dense executor, the delta runner): one
// contiguous buffer range (sent from / received into where it lies, zero
// copy), or the copies that pack it into or unpack it out of staging.
#ifndef REFIT_EXEC_PROGRAM_MESSAGE_PLACE_H_
#define REFIT_EXEC_PROGRAM_MESSAGE_PLACE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "exec/program/copy_program.h"
#include "plan/plan.h"

namespace refit {

struct MessagePlace {
  char* direct = nullptr;       // the buffer range, when contiguous
  std::vector<CopyTask> tasks;  // otherwise: pack (sender) or unpack (receiver)
};

// Returns where the sending side (`sends`: a trainer rank, or an engine
// rank forwarding a relay; the message's src fields, PackProgram) or the
// receiving side (its dst fields, UnpackProgram) of `m` lies in `buffers`,
// the rank's buffers indexed like `layout.buffers` (others null). Fails
// with INVALID_ARGUMENT "<who>: buffer <name> is not registered" when a
// buffer it needs is null, or the copy program's error.
absl::StatusOr<MessagePlace> PlaceMessage(const Plan& plan, const Message& m, bool sends,
                                          const SideLayout& layout,
                                          const std::vector<char*>& buffers,
                                          absl::string_view who);

}  // namespace refit

#endif  // REFIT_EXEC_PROGRAM_MESSAGE_PLACE_H_
