#include "exec/delta/delta_room.h"

#include <algorithm>

namespace refit {

int64_t PairBound(const PlannerOptions& options, int64_t window, int64_t wave_bytes,
                  int64_t pair_bytes, int64_t pair_largest) {
  if (window > 0) return window;
  const int64_t cap = options.max_wave_bytes > 0 ? options.max_wave_bytes : LaneShare(options);
  if (pair_largest > cap) return pair_bytes;
  return std::min(wave_bytes, cap);
}

int64_t PairCodedCap(int64_t room, int64_t bound, int64_t pair_bytes,
                     int64_t receiver_staging) {
  // Summed over a receiver's peers, each pair's packed bytes and cap come
  // to at most max(room - 16, bound) (a pair whose packed bytes pass its
  // share of the room gets no encodings, and packs at most its bytes): at
  // most the room while the bound is. A bound past the room (waves larger
  // than the lane share, PlannerOptions::max_wave_bytes) leaves none, but
  // to a pair alone in its batch.
  if (room <= 16 || pair_bytes <= 0) return 0;
  // Alone in the batch (the bound is the pair's own bytes): the room left.
  if (bound == pair_bytes) return std::max<int64_t>(0, room - 16 - receiver_staging);
  if (bound <= 0 || bound > room) return 0;
  const __int128 share = static_cast<__int128>(room - 16) * pair_bytes / bound;
  const __int128 cap = share - receiver_staging;
  if (cap <= 0) return 0;
  return cap > room ? room : static_cast<int64_t>(cap);
}

}  // namespace refit
