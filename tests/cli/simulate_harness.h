// Helpers of the `refit simulate` tests: run the binary, make a random
// checkpoint of a model's logical tensors and write it as safetensors.
#ifndef REFIT_TESTS_CLI_SIMULATE_HARNESS_H_
#define REFIT_TESTS_CLI_SIMULATE_HARNESS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cli/safetensors.h"
#include "layout/tensor_spec.h"

namespace refit {

// A fresh directory under TEST_TMPDIR (or /tmp).
std::string TmpDir(const std::string& name);

struct CmdResult {
  int rc = -1;
  std::string out;
};

// Runs `refit <args>` (the binary from the test's data), stdout and stderr.
CmdResult RunRefit(const std::string& args);

// Random checkpoint tensors (HF names, per-expert for stacked tensors).
struct Checkpoint {
  std::vector<std::string> names;
  std::map<std::string, SafetensorsTensor> meta;
  std::map<std::string, std::vector<uint8_t>> bytes;
};

// Random bytes for every member of `tensors` from `seed` (bf16 values
// finite).
Checkpoint MakeCheckpoint(const std::vector<TensorSpec>& tensors, uint32_t seed);

// Writes the checkpoint as one file (shards = 1) or `shards` files + index;
// returns the path to pass as --checkpoint. `skip` is left out; `reshape`
// gets a wrong shape.
std::string WriteCheckpoint(const Checkpoint& c, const std::string& dir, int shards,
                            const std::string& skip = "", const std::string& reshape = "");

}  // namespace refit

#endif  // REFIT_TESTS_CLI_SIMULATE_HARNESS_H_
