// `refit simulate`: a whole refit in one process from an HF safetensors
// checkpoint. Builds every trainer rank's buffers by the trainer convention
// (Megatron rank = (pp*DP + dp)*TP + tp; FSDP rank = replica*S + shard),
// runs the plan through the executor over the in-process transport (one
// thread per rank), and writes DIR/trainer/rank<k>.safetensors and
// DIR/engine/rank<k>.safetensors (engine rank k = dp_rank*TP + tp_rank)
// holding each rank's buffers under the convention's names and local
// shapes. Padding rows are zeros; FP8 bytes and scales pass unchanged.
#ifndef REFIT_TOOLS_CLI_SIMULATE_COMMAND_H_
#define REFIT_TOOLS_CLI_SIMULATE_COMMAND_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace refit {

struct SimulateCommandOptions {
  std::string model;       // built-in name or config.json path
  std::string checkpoint;  // FILE.safetensors or a directory
  std::string trainer;
  std::string engine;
  std::string dtype;       // empty: the config's own weight format
  std::string out;         // output directory
  int64_t staging_mib = 512;
  int32_t lanes = 2;
  absl::Duration timeout = absl::Seconds(300);
};

// Returns a summary to print. INVALID_ARGUMENT naming the tensor for a
// tensor missing from the checkpoint or whose shape/dtype disagrees with
// the config, the layout/plan errors of `refit plan`, the executor's status
// naming the rank if a rank fails, INTERNAL naming a file that cannot be
// written.
absl::StatusOr<std::string> RunSimulateCommand(
    const SimulateCommandOptions& opt);

}  // namespace refit

#endif  // REFIT_TOOLS_CLI_SIMULATE_COMMAND_H_
