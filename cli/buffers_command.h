// `refit buffers`: the buffers a trainer rank or engine worker must give
// refit under a convention (names, local shapes, dtypes, bytes) — what a
// member registers, and what an integration matches against its own
// parameters (e.g. vLLM's named_parameters(), fused qkv_proj included).
// Flag parsing lives in refit_main.cc.
#ifndef REFIT_TOOLS_CLI_BUFFERS_COMMAND_H_
#define REFIT_TOOLS_CLI_BUFFERS_COMMAND_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace refit {

struct BuffersCommandOptions {
  std::string model;    // built-in name or config.json path
  std::string trainer;  // exactly one of trainer / engine
  std::string engine;
  int32_t rank = -1;    // -1: every rank
  bool json = false;
};

// Returns the text to print (a table per rank, or one JSON array of
// {"rank", "buffers": [{"name", "shape", "dtype", "bytes"}]}). Fails with
// INVALID_ARGUMENT when neither or both of trainer / engine are given, for
// a bad convention or a rank outside the world (naming it), NOT_FOUND for an
// unknown model.
absl::StatusOr<std::string> RunBuffersCommand(const BuffersCommandOptions& opt);

}  // namespace refit

#endif  // REFIT_TOOLS_CLI_BUFFERS_COMMAND_H_
