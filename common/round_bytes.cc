// A round's bytes and throughput (see round_bytes.h).
#include "common/round_bytes.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace refit {

void RoundBytes::AddEngineRank(int64_t received) {
  per_engine_rank = std::max(per_engine_rank, received);
  all_engine_ranks += received;
  ++engine_ranks;
}

double RoundBytesPerSecond(const RoundBytes& bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes.per_engine_rank) / seconds : 0;
}

std::string HumanBytes(int64_t bytes) {
  if (bytes < 1000000) return absl::StrCat(bytes, bytes == 1 ? " byte" : " bytes");
  if (bytes < 1000000000) return absl::StrFormat("%.1f MB", bytes / 1e6);
  if (bytes < int64_t{1000000000000}) return absl::StrFormat("%.2f GB", bytes / 1e9);
  return absl::StrFormat("%.2f TB", bytes / 1e12);
}

std::string HumanRate(double bytes_per_second) {
  return absl::StrFormat("%.2f GB/s", bytes_per_second / 1e9);
}

}  // namespace refit
