// PlaceMessage (see message_place.h).
#include "exec/program/message_place.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace refit {
namespace {

absl::Status NotRegistered(const SideLayout& layout, int32_t b, absl::string_view who) {
  return absl::InvalidArgumentError(absl::StrCat(
      who, ": buffer ",
      b >= 0 && static_cast<size_t>(b) < layout.buffers.size() ? layout.buffers[b].name
                                                                : absl::StrCat("#", b),
      " is not registered"));
}

bool Registered(const std::vector<char*>& buffers, int32_t b) {
  return b >= 0 && static_cast<size_t>(b) < buffers.size() && buffers[b] != nullptr;
}

}  // namespace

absl::StatusOr<MessagePlace> PlaceMessage(const Plan& plan, const Message& m, bool sends,
                                          const SideLayout& layout,
                                          const std::vector<char*>& buffers,
                                          absl::string_view who) {
  MessagePlace place;
  const bool contiguous = sends ? m.src_contiguous : m.dst_contiguous;
  const int32_t cbuf = sends ? m.src_buffer : m.dst_buffer;
  if (contiguous && cbuf >= 0 && static_cast<size_t>(cbuf) < buffers.size()) {
    if (buffers[cbuf] == nullptr) return NotRegistered(layout, cbuf, who);
    place.direct = buffers[cbuf] + (sends ? m.src_offset : m.dst_offset);
    return place;
  }
  absl::StatusOr<std::vector<CopyTask>> tasks =
      sends ? PackProgram(plan, m) : UnpackProgram(plan, m);
  if (!tasks.ok()) return tasks.status();
  for (const CopyTask& t : *tasks) {
    const int32_t b = sends ? t.src_buffer : t.dst_buffer;
    if (!Registered(buffers, b)) return NotRegistered(layout, b, who);
  }
  place.tasks = std::move(*tasks);
  return place;
}

}  // namespace refit
