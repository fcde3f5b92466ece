// One meaning of a round's bytes and throughput, used wherever refit reports
// them (refitd's status, log and metrics, `refit status`, the demo), as
// nccl-tests counts them (GB = 1e9 bytes):
//  * bytes: what one engine rank (an engine GPU) received in the round: the
//    most any engine rank received (every engine rank receives the same when
//    the engines split the model evenly). Each byte is counted once, at its
//    receiver; trainers' sends are not added.
//  * seconds: the round's time, the slowest participant's data-plane time
//    (trainers included), as the members reported it. A round's duration
//    from start to commit (control plane included) is reported separately.
//  * throughput: bytes / seconds, in bytes per second (GB/s = 1e9 of them).
#ifndef REFIT_COMMON_ROUND_BYTES_H_
#define REFIT_COMMON_ROUND_BYTES_H_

#include <cstdint>
#include <string>

namespace refit {

// The bytes of one round, gathered from its engine ranks' reports.
struct RoundBytes {
  int64_t per_engine_rank = 0;  // the round's bytes: most one engine rank received
  int64_t all_engine_ranks = 0;  // every engine rank's received bytes, added
  int32_t engine_ranks = 0;      // engine ranks counted

  // Counts one engine rank that received `received` bytes.
  void AddEngineRank(int64_t received);
};

// Returns the round's throughput in bytes per second: bytes.per_engine_rank
// over `seconds` (the slowest participant's data-plane time); 0 when
// `seconds` is not positive.
double RoundBytesPerSecond(const RoundBytes& bytes, double seconds);

// Returns `bytes` for people, decimal units: "512 bytes", "12.3 MB",
// "16.38 GB", "1.20 TB" (1e6, 1e9, 1e12).
std::string HumanBytes(int64_t bytes);

// Returns a throughput for people: "363.80 GB/s" (GB = 1e9 bytes).
std::string HumanRate(double bytes_per_second);

}  // namespace refit

#endif  // REFIT_COMMON_ROUND_BYTES_H_
