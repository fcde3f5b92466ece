// ConstantTimeEquals (see constant_time.h).
#include "common/constant_time.h"

namespace refit {

bool ConstantTimeEquals(absl::string_view got, absl::string_view expected) {
  unsigned char diff = got.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char c = got.empty() ? 0 : static_cast<unsigned char>(got[i % got.size()]);
    diff |= c ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

}  // namespace refit
