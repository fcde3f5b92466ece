// The colocated benchmark's process plumbing: each worker writes its result
// as key=value lines into a file, the parent spawns workers of this program
// and reads their results back.
#ifndef REFIT_TOOLS_BENCH_COLOCATED_SPAWN_H_
#define REFIT_TOOLS_BENCH_COLOCATED_SPAWN_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace refit::bench {

// Writes `kv` to `path`, one key=value line each.
void WriteResult(const std::string& path, const std::map<std::string, std::string>& kv);

// The key=value lines of `path`; empty when it is missing.
std::map<std::string, std::string> ReadResult(const std::string& path);

// Runs `args` of this program as `n` processes (--worker ARGS... INDEX DIR
// FLAGS...), each writing DIR/result.INDEX; bounded by 400 s. Returns the
// results; DEADLINE_EXCEEDED naming a worker that did not finish (it is
// killed), INTERNAL with a worker's error or naming one that crashed.
absl::StatusOr<std::vector<std::map<std::string, std::string>>> Spawn(
    const char* self, const std::vector<std::string>& args, int n, const std::string& dir,
    const std::vector<std::string>& flags);

}  // namespace refit::bench

#endif  // REFIT_TOOLS_BENCH_COLOCATED_SPAWN_H_
