// BoundedText and BoundedStatus (see bounded_text.h).
#include "server/bounded_text.h"

#include "absl/strings/str_cat.h"

namespace refit {

std::string BoundedText(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t keep = max_bytes;
  // Back up over UTF-8 continuation bytes (10xxxxxx) to a character start.
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
  return absl::StrCat(text.substr(0, keep), " ... [", text.size() - keep,
                      " bytes cut]");
}

absl::Status BoundedStatus(const absl::Status& status, size_t max_bytes) {
  if (status.message().size() <= max_bytes) return status;
  return absl::Status(status.code(), BoundedText(status.message(), max_bytes));
}

}  // namespace refit
