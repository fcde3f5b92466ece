// Text from peers (host ids, buffer names, failure reasons) made safe to
// print on one line of a log or a terminal: control characters escaped, so
// a name holding a newline cannot forge a log line and one holding ESC
// cannot drive the terminal.
#ifndef REFIT_COMMON_PRINTABLE_H_
#define REFIT_COMMON_PRINTABLE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace refit {

// Returns `text` with every C0 control byte (0x00-0x1F), DEL (0x7F), C1
// control character (U+0080-U+009F written as UTF-8) and byte that is not
// part of well-formed UTF-8 written as an escape: \n, \r, \t, or \xHH (C1
// controls as \u00HH). A backslash stays a backslash. Other text, UTF-8
// included, is returned as it is.
std::string Printable(absl::string_view text);

}  // namespace refit

#endif  // REFIT_COMMON_PRINTABLE_H_
