/* refit's client library as a C ABI, for bindings (the Python module in
 * client/python loads it with ctypes) and for programs in other languages.
 * It is the C++ Member (client/member.h) behind an opaque handle.
 *
 * Shipped as librefit_client.so (host buffers, Gloo/TCP transport) and, in
 * CUDA builds, librefit_client_gpu.so (also "cuda:N" buffers over NCCL).
 * Only the refit_* symbols below are exported. (Tests and GPU checks load
 * librefit_client_testing.so / librefit_client_gpu_testing.so instead: the
 * same library plus the test-pattern entry points of
 * testing/c_api_testing.h.)
 *
 * Errors: every function that can fail returns 0 on success or an
 * absl::StatusCode (3 INVALID_ARGUMENT, 4 DEADLINE_EXCEEDED, 5 NOT_FOUND,
 * 9 FAILED_PRECONDITION, 10 ABORTED, 13 INTERNAL, 14 UNAVAILABLE, 16
 * UNAUTHENTICATED, ...); refit_last_error() then returns the message, which
 * names the rank and the parameter or key involved. No function aborts the
 * process on bad input; none blocks past the timeout it is given.
 *
 * Strings returned through char** are JSON or plain text, NUL-terminated,
 * owned by the caller: free them with refit_free().
 *
 * A member handle is used by one thread at a time (calls on different
 * members may run concurrently; refit_member_round_progress alongside
 * refit_member_run_round); refit_member_close only after every other call
 * on it returned.
 */
#ifndef REFIT_CLIENT_C_API_H_
#define REFIT_CLIENT_C_API_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The message of this thread's last failed call ("" if none). Valid until
 * the thread's next refit_* call. */
const char* refit_last_error(void);

/* Frees a string this library returned. NULL is ignored. */
void refit_free(char* p);

/* "refit-client <version> (host)" or "(host, cuda)". */
const char* refit_build_info(void);

/* The buffers a member must give, as a JSON array of
 * {"name", "shape": [...], "dtype": "bf16", "bytes"} in layout order.
 * options_json: {"side": "trainer"|"engine", "rank", "model" (built-in
 * name or config.json path), "convention"} (other member options are
 * accepted and ignored). */
int refit_expected_buffers(const char* options_json, char** buffers_json);

typedef struct refit_member refit_member;

/* Checks the given buffers against the convention, connects to refitd and
 * registers. options_json (required: "server", "side", "rank", "model",
 * "convention"; engines also "engine_id"):
 *   {"server": "host:port", "token": "...", "tls": false, "root_ca_pem",
 *    "client_cert_pem", "client_key_pem", "tls_server_name",
 *    "job": "refit", "side", "engine_id", "rank", "model", "convention",
 *    "host_id" (default: hostname), "device": "cpu" | "cuda:N",
 *    "verify": false (per-segment checksums on both sides),
 *    "staged": false (engines: staged rounds, refit_member_receive_round),
 *    "staging_bytes": -1 (staged GPU members: device staging up to this
 *      many bytes, the rest in pinned host memory; -1: all on the device),
 *    "transport": "nccl" | "pull" (GPU buffers; "pull": the colocated pull
 *      path between the processes of one host, for members that share GPUs;
 *      "ipc" is accepted for it too; every member of a job uses the same), "heartbeat_ms": 1000, "rpc_timeout_s": 10,
 *    "connect_timeout_s": 2 (how long a call waits for refitd's connection
 *      before it fails with 14 UNAVAILABLE naming refitd's address),
 *    "job_key": the job key refitd was given (--job_key_file), if any}
 * Buffer i is names[i], sizes[i] bytes at ptrs[i] (host or device memory as
 * "device" says); the memory must stay valid until refit_member_close.
 * Unknown JSON keys are INVALID_ARGUMENT (a misspelt option is not
 * silently ignored), and so, at once, is a "server" that is not
 * "host:port" (no port, a URL such as "http://host:port") or a "token"
 * with a byte a gRPC header cannot carry once surrounding whitespace (a
 * token file's newline) is stripped; the message never holds the token.
 * 14 UNAVAILABLE when refitd is not reachable within "connect_timeout_s"
 * (or the timeout, if shorter), saying why ("connection refused", ...). */
int refit_member_join(const char* options_json, int32_t num_buffers,
                      const char* const* names, void* const* ptrs,
                      const int64_t* sizes, double timeout_s,
                      refit_member** member);

/* Tells refitd that the member options_json names (as for
 * refit_member_join; "server" required) cannot join, and why: `reason`
 * (e.g. the layer whose layout refit does not write). Every member waiting
 * for a plan then fails at once with 9 FAILED_PRECONDITION naming this
 * member and the reason, until it registers. Registers nothing. */
int refit_refuse(const char* options_json, const char* reason, double timeout_s);

/* Registers again after refitd restarted or expired this member (a call
 * returned 14 UNAVAILABLE): retries until refitd is back or the timeout
 * passes (14 UNAVAILABLE naming refitd's address); then call
 * refit_member_prepare. */
int refit_member_rejoin(refit_member* member, double timeout_s);

/* Awaits this member's plan; info_json (may be NULL) receives
 * {"member_id", "fingerprint", "global_rank", "global_world"}. */
int refit_member_prepare(refit_member* member, double timeout_s,
                         char** info_json);

/* 1 if refitd has a newer plan (call refit_member_prepare again), else 0. */
int refit_member_plan_changed(refit_member* member);

/* Starts round `version` (trainer ranks); retries while refitd is not
 * ready (a plan being built) until the timeout; 14 UNAVAILABLE naming
 * refitd's address within "connect_timeout_s" when refitd is gone. */
int refit_member_start_round(refit_member* member, int64_t version,
                             double timeout_s);

/* Starts the next version, one above the last round refitd started, and
 * stores it in *version (trainer rank 0 of a run that keeps no count of its
 * own); retries and fails as refit_member_start_round. */
int refit_member_start_next_round(refit_member* member, double timeout_s,
                                  int64_t* version);

/* The next announced round's version. */
int refit_member_wait_for_round(refit_member* member, double timeout_s,
                                int64_t* version);

/* Moves this member's bytes of round `version` and waits for refitd's
 * commit (0) or abort (10 ABORTED with refitd's reason). stats_json (may be
 * NULL): {"bytes_sent", "bytes_received", "seconds",
 * "peak_staging_bytes"}. */
int refit_member_run_round(refit_member* member, int64_t version,
                           double timeout_s, char** stats_json);

/* A staged engine member ("staged": true) in two steps, the engine serving
 * between them (docs/engines.md, "Serving while weights arrive"):
 * receive_round moves round `version` into staging, the live buffers
 * untouched, and returns once every engine rank holds it (10 ABORTED: the
 * round aborted; the live buffers are as they were); apply_round writes the
 * live buffers from staging and waits for the commit. stats_json as
 * run_round's, with "pause_seconds" (apply_round: the time the live
 * buffers took to write). 9 FAILED_PRECONDITION: not staged, or
 * apply_round of another version than receive_round returned. */
int refit_member_receive_round(refit_member* member, int64_t version, double timeout_s,
                               char** stats_json);
int refit_member_apply_round(refit_member* member, int64_t version, double timeout_s,
                             char** stats_json);
/* What refitd says of round `version` so far, as JSON: {"version",
 * "running" (false: not started yet, or ended), "seconds" (since it
 * started), "reported", "members" (participants that reported success, of
 * all), "engine_bytes", "engine_ranks" (bytes the engine ranks that
 * reported received), "bytes", "planned_bytes" (this member's bytes moved
 * so far, of its plan slice's), "round_bytes", "round_planned_bytes" (every
 * engine rank's received so far, of all they receive)}; the bytes so far
 * come with the members' heartbeats, about once a second. The one call that may run while another thread is
 * in refit_member_run_round on the same member (for progress lines). */
int refit_member_round_progress(refit_member* member, int64_t version, double timeout_s,
                                char** progress_json);

/* committed: the last version committed into engine `engine_id` (0: none).
 * torn: non-zero when round `torn` aborted after it had started on that
 * engine: its buffers may hold part of it, and no single version, until a
 * later round commits. Either pointer may be NULL. */
int refit_member_engine_state(refit_member* member, const char* engine_id,
                              double timeout_s, int64_t* committed,
                              int64_t* torn);

/* The last version committed into engine `engine_id` (0: none). */
int refit_member_current_version(refit_member* member, const char* engine_id,
                                 double timeout_s, int64_t* version);

/* refitd's key-value store (e.g. a barrier among members). kv_get waits
 * for the key until the timeout (DEADLINE_EXCEEDED naming the key). */
int refit_member_kv_set(refit_member* member, const char* key,
                        const char* value, double timeout_s);
int refit_member_kv_get(refit_member* member, const char* key,
                        double timeout_s, char** value);

/* Leaves the membership (an engine replica going away between rounds). */
int refit_member_leave(refit_member* member, double timeout_s);

/* Leaves the membership unless left already (at most 2 s; at once when
 * refitd is gone), so refitd plans without this member and the same
 * program can run again at once; stops the member's threads and frees it.
 * NULL is ignored. */
void refit_member_close(refit_member* member);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* REFIT_CLIENT_C_API_H_ */
