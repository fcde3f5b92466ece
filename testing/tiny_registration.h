// A valid registration of the built-in tiny-qwen3 model, for tests that talk
// to refitd directly: the buffers the mapping expects of one rank.
#ifndef REFIT_TESTING_TINY_REGISTRATION_H_
#define REFIT_TESTING_TINY_REGISTRATION_H_

#include <string>

#include "proto/refit_service.pb.h"

namespace refit::testing {

// Returns a registration (this build's protocol version, host "h", world
// size 1) of a trainer (`trainer`) or an engine replica `engine_id` of job
// `job`, following `convention` (e.g. "megatron:tp=1", "vllm:tp=1").
v1::Registration TinyRegistration(bool trainer, const std::string& job,
                                  const std::string& engine_id = "",
                                  const std::string& convention = "");

}  // namespace refit::testing

#endif  // REFIT_TESTING_TINY_REGISTRATION_H_
