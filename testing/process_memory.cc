// This process's resident memory (see process_memory.h).
#include "testing/process_memory.h"

#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file.h"

namespace refit::testing {

ProcessMemory ReadProcessMemory() {
  ProcessMemory m;
  absl::StatusOr<std::string> status = ReadFileToString("/proc/self/status", 1 << 20);
  if (!status.ok()) return m;
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    double* field = absl::ConsumePrefix(&line, "VmRSS:")   ? &m.rss_mib
                    : absl::ConsumePrefix(&line, "VmHWM:") ? &m.hwm_mib
                                                           : nullptr;
    int64_t kib = 0;
    if (field != nullptr && absl::ConsumeSuffix(&line, " kB") &&
        absl::SimpleAtoi(line, &kib)) {
      *field = kib / 1024.0;
    }
  }
  return m;
}

}  // namespace refit::testing
