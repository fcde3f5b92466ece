// Peer names in data-plane errors: transports name a peer by its global
// rank ("peer rank 5"); a member that knows every rank's member name (its
// bootstrap's member_names) adds it, so that a relay or trainer that died
// is named as the operator knows it ("peer rank 5 (engine B rank 1)").
#ifndef REFIT_EXEC_TRANSPORT_PEER_NAMES_H_
#define REFIT_EXEC_TRANSPORT_PEER_NAMES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace refit {

// Returns `s` with " (NAME)" after each "peer rank N" in its message, NAME
// being names[N] (skipped when N is outside `names` or names[N] is empty),
// with the same code and payloads. Returns OK and messages naming no peer
// unchanged. Never fails.
absl::Status NamePeers(const absl::Status& s, absl::Span<const std::string> names);

// Returns a round's data-plane failure `s` as the member reports it: a
// transport's UNAVAILABLE (a peer's connection closed or reset: the peer
// died or was cut off mid-round) fails the round, not this member, so it
// becomes ABORTED with the same message and payloads; any other status is
// returned unchanged. UNAVAILABLE from a member's round then means only
// that refitd is unreachable (answered by rejoining), and a peer's failure
// by running the next round. Never fails.
absl::Status RoundFailureOfPeer(const absl::Status& s);

// Returns the member name of every global rank of a world of `world`
// ranks, given engines `engine_ids`, each starting at the global rank in
// `engine_first_ranks` (ascending; ranks before the first are trainer
// ranks) and holding `engine_rank_counts` ranks (empty: up to the next
// engine's first rank, the last one to the world's end): "trainer rank R",
// "engine ID rank R"; ranks of engines not listed get an empty name. Empty
// when the lists are empty or differ in size. Never fails.
std::vector<std::string> MemberNames(int32_t world, absl::Span<const std::string> engine_ids,
                                     absl::Span<const int32_t> engine_first_ranks,
                                     absl::Span<const int32_t> engine_rank_counts = {});

}  // namespace refit

#endif  // REFIT_EXEC_TRANSPORT_PEER_NAMES_H_
