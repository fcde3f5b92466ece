/* The testing ABI of refit's client library: test patterns of a weight
 * version (testing/member_patterns.h) in a member's buffers, for refit's
 * tests and GPU checks through bindings (the Python module's
 * refit.testing). Exported only by librefit_client_testing.so and
 * librefit_client_gpu_testing.so (the shipped libraries plus these); the
 * shipped librefit_client.so and librefit_client_gpu.so lack them.
 *
 * Errors as in client/c_api.h: 0 or an absl::StatusCode, the message in
 * refit_last_error().
 */
#ifndef REFIT_TESTING_C_API_TESTING_H_
#define REFIT_TESTING_C_API_TESTING_H_

#include <stdint.h>

#include "client/c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills (trainers) or checks (engines: 13 INTERNAL naming the first wrong
 * elements) the pattern of weight version `version` in host memory. Buffer
 * i of the n given is the host copy of the registered buffer names[i]
 * (required for device buffers); registered buffers not given are used
 * directly and must then be host memory (3 INVALID_ARGUMENT otherwise, and
 * for an unknown name, a null handle or a null copy). */
int refit_testing_fill_pattern(refit_member* member, int64_t version,
                               int32_t n, const char* const* names,
                               void* const* host_ptrs);
int refit_testing_check_pattern(refit_member* member, int64_t version,
                                int32_t n, const char* const* names,
                                void* const* host_ptrs);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* REFIT_TESTING_C_API_TESTING_H_ */
