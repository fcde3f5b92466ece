// This process's resident memory, for refit's benchmarks and measuring
// tools (Linux: /proc/self/status).
#ifndef REFIT_TESTING_PROCESS_MEMORY_H_
#define REFIT_TESTING_PROCESS_MEMORY_H_

namespace refit::testing {

struct ProcessMemory {
  double rss_mib = -1;  // VmRSS: resident now
  double hwm_mib = -1;  // VmHWM: the most resident so far
};

// Returns VmRSS and VmHWM of this process in MiB; -1 for a field that
// cannot be read (no /proc).
ProcessMemory ReadProcessMemory();

}  // namespace refit::testing

#endif  // REFIT_TESTING_PROCESS_MEMORY_H_
