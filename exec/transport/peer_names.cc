// NamePeers (see peer_names.h).
#include "exec/transport/peer_names.h"

#include <cctype>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace refit {

absl::Status NamePeers(const absl::Status& s, absl::Span<const std::string> names) {
  if (s.ok() || names.empty()) return s;
  constexpr absl::string_view kPeer = "peer rank ";
  const absl::string_view msg = s.message();
  std::string out;
  bool named = false;
  size_t at = 0;
  while (true) {
    const size_t p = msg.find(kPeer, at);
    if (p == absl::string_view::npos) break;
    size_t e = p + kPeer.size();
    int64_t rank = 0;
    while (e < msg.size() && std::isdigit(static_cast<unsigned char>(msg[e])) &&
           rank < static_cast<int64_t>(names.size())) {
      rank = rank * 10 + (msg[e] - '0');
      ++e;
    }
    const bool digits = e > p + kPeer.size();
    absl::StrAppend(&out, msg.substr(at, e - at));
    at = e;
    if (digits && rank < static_cast<int64_t>(names.size()) && !names[rank].empty() &&
        (e == msg.size() || !std::isdigit(static_cast<unsigned char>(msg[e])))) {
      absl::StrAppend(&out, " (", names[rank], ")");
      named = true;
    }
  }
  if (!named) return s;
  absl::StrAppend(&out, msg.substr(at));
  absl::Status r(s.code(), out);
  s.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    r.SetPayload(url, payload);
  });
  return r;
}

std::vector<std::string> MemberNames(int32_t world, absl::Span<const std::string> engine_ids,
                                     absl::Span<const int32_t> engine_first_ranks,
                                     absl::Span<const int32_t> engine_rank_counts) {
  std::vector<std::string> names;
  if (engine_ids.empty() || engine_ids.size() != engine_first_ranks.size() ||
      (!engine_rank_counts.empty() && engine_rank_counts.size() != engine_ids.size())) {
    return names;
  }
  names.reserve(world);
  size_t e = 0;
  for (int32_t g = 0; g < world; ++g) {
    while (e < engine_ids.size() && engine_first_ranks[e] <= g) ++e;
    // Engine e - 1 holds g (none: a trainer rank), if g is within its count.
    if (e == 0) {
      names.push_back(absl::StrCat("trainer rank ", g));
    } else if (!engine_rank_counts.empty() &&
               g - engine_first_ranks[e - 1] >= engine_rank_counts[e - 1]) {
      names.emplace_back();  // an engine this member does not exchange with
    } else {
      names.push_back(absl::StrCat("engine ", engine_ids[e - 1], " rank ",
                                   g - engine_first_ranks[e - 1]));
    }
  }
  return names;
}

absl::Status RoundFailureOfPeer(const absl::Status& s) {
  if (!absl::IsUnavailable(s)) return s;
  absl::Status out = absl::AbortedError(s.message());
  s.ForEachPayload([&out](absl::string_view url, const absl::Cord& payload) {
    out.SetPayload(url, payload);
  });
  return out;
}

}  // namespace refit
