// The connections refitd's connection gate (acceptor.h) holds before their
// first request, grouped by the address they came from, so that a flood
// from one address gives way before anyone else's connection does.
#ifndef REFIT_SERVER_PENDING_CONNECTIONS_H_
#define REFIT_SERVER_PENDING_CONNECTIONS_H_

#include <sys/socket.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/time/time.h"

namespace refit {

// Returns the key connections from `addr` are grouped under: an IPv4
// address (also one mapped into IPv6) as "a.b.c.d", an IPv6 address by
// its /64 prefix (what one host is usually given), anything else "other".
std::string SourceKey(const sockaddr_storage& addr, socklen_t len);

// Returns `addr` as gRPC writes a peer: "ipv4:10.0.0.1:5000",
// "ipv6:[fe80::1]:5000" (an IPv4 address mapped into IPv6 as IPv4),
// "unknown" for anything else.
std::string PeerUri(const sockaddr_storage& addr, socklen_t len);

class PendingConnections {
 public:
  struct Entry {
    int fd = -1;
    uint64_t tag = 0;  // its epoll tag
    absl::Time accepted;
    std::string source;    // SourceKey of its peer
    std::string peer;      // PeerUri of its peer
    bool greeted = false;  // the server preface was sent
  };

  // Holds `e` (newest).
  void Add(Entry e);

  // Returns how many are held, in all and from `source`.
  size_t size() const { return entries_.size(); }
  int CountFrom(const std::string& source) const;

  // Removes and returns the one that gives way to a new connection: the
  // oldest of those from the address holding the most. nullopt when none
  // is held.
  std::optional<Entry> TakeVictim();

  // Calls `keep` on each, oldest first, and removes those it returns false
  // for (it has closed or handed over their descriptors).
  void Filter(absl::FunctionRef<bool(Entry&)> keep);

  // Removes every entry and returns them (oldest first).
  std::deque<Entry> TakeAll();

 private:
  void Forget(const Entry& e);

  std::deque<Entry> entries_;  // oldest first
  absl::flat_hash_map<std::string, int> per_source_;
};

}  // namespace refit

#endif  // REFIT_SERVER_PENDING_CONNECTIONS_H_
