// The process_* series Prometheus client libraries export for a process,
// read from /proc on each scrape: CPU seconds, resident and virtual memory,
// open and maximum file descriptors, start time.
#ifndef REFIT_SERVER_PROCESS_METRICS_H_
#define REFIT_SERVER_PROCESS_METRICS_H_

#include <string>

namespace refit {

// Returns the exposition (# HELP, # TYPE and one sample each) of
// process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_max_fds and
// process_start_time_seconds for this process. A figure /proc does not give
// (not Linux, a read refused) is left out, with its HELP and TYPE lines.
std::string ProcessMetricsText();

}  // namespace refit

#endif  // REFIT_SERVER_PROCESS_METRICS_H_
