// PendingConnections (see pending_connections.h).
#include "server/pending_connections.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace refit {

std::string SourceKey(const sockaddr_storage& addr, socklen_t len) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(addr);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    return text;
  }
  if (addr.ss_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(addr);
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) {
      in_addr v4;
      std::memcpy(&v4, v6.sin6_addr.s6_addr + 12, 4);
      inet_ntop(AF_INET, &v4, text, sizeof(text));
      return text;
    }
    in6_addr prefix = v6.sin6_addr;
    std::memset(prefix.s6_addr + 8, 0, 8);
    inet_ntop(AF_INET6, &prefix, text, sizeof(text));
    return std::string(text) + "/64";
  }
  return "other";
}

std::string PeerUri(const sockaddr_storage& addr, socklen_t len) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(addr);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    return std::string("ipv4:") + text + ":" + std::to_string(ntohs(v4.sin_port));
  }
  if (addr.ss_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(addr);
    const std::string port = std::to_string(ntohs(v6.sin6_port));
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) {
      in_addr v4;
      std::memcpy(&v4, v6.sin6_addr.s6_addr + 12, 4);
      inet_ntop(AF_INET, &v4, text, sizeof(text));
      return std::string("ipv4:") + text + ":" + port;
    }
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    return std::string("ipv6:[") + text + "]:" + port;
  }
  return "unknown";
}

void PendingConnections::Add(Entry e) {
  ++per_source_[e.source];
  entries_.push_back(std::move(e));
}

int PendingConnections::CountFrom(const std::string& source) const {
  auto it = per_source_.find(source);
  return it == per_source_.end() ? 0 : it->second;
}

void PendingConnections::Forget(const Entry& e) {
  auto it = per_source_.find(e.source);
  if (it != per_source_.end() && --it->second <= 0) per_source_.erase(it);
}

std::optional<PendingConnections::Entry> PendingConnections::TakeVictim() {
  if (entries_.empty()) return std::nullopt;
  int most = 0;
  for (const auto& [source, count] : per_source_) most = std::max(most, count);
  // The oldest entry whose address holds the most (ties: the oldest such).
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (CountFrom(it->source) != most) continue;
    Entry victim = std::move(*it);
    entries_.erase(it);
    Forget(victim);
    return victim;
  }
  return std::nullopt;  // unreachable: some entry's address holds the most
}

void PendingConnections::Filter(absl::FunctionRef<bool(Entry&)> keep) {
  std::deque<Entry> kept;
  for (Entry& e : entries_) {
    if (keep(e)) {
      kept.push_back(std::move(e));
    } else {
      Forget(e);
    }
  }
  entries_.swap(kept);
}

std::deque<PendingConnections::Entry> PendingConnections::TakeAll() {
  per_source_.clear();
  return std::exchange(entries_, {});
}

}  // namespace refit
