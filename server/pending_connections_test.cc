// PendingConnections: the connection that gives way is the oldest from the
// address holding the most; SourceKey groups IPv6 by /64.
#include "server/pending_connections.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

#include "gtest/gtest.h"

namespace refit {
namespace {

PendingConnections::Entry From(int fd, const std::string& source) {
  PendingConnections::Entry e;
  e.fd = fd;
  e.source = source;
  return e;
}

TEST(PendingConnectionsTest, AFloodingAddressGivesWayFirst) {
  PendingConnections p;
  p.Add(From(1, "10.0.0.9"));  // a member's, the oldest
  for (int i = 0; i < 5; ++i) p.Add(From(10 + i, "10.0.0.66"));
  p.Add(From(2, "10.0.0.8"));
  EXPECT_EQ(p.size(), 7u);
  EXPECT_EQ(p.CountFrom("10.0.0.66"), 5);
  // The flood's oldest go first, whatever the members' age.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(p.TakeVictim()->fd, 10 + i);
  // Now every address holds one: the oldest overall.
  EXPECT_EQ(p.TakeVictim()->fd, 1);
  p.Filter([](PendingConnections::Entry& e) { return e.fd != 14; });
  EXPECT_EQ(p.CountFrom("10.0.0.66"), 0);
  EXPECT_EQ(p.TakeVictim()->fd, 2);
  EXPECT_FALSE(p.TakeVictim().has_value());
  EXPECT_EQ(p.size(), 0u);
}

TEST(PendingConnectionsTest, SourceKeyGroupsIpv6ByPrefixAndUnmapsIpv4) {
  sockaddr_storage s{};
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&s);
  v6->sin6_family = AF_INET6;
  inet_pton(AF_INET6, "2001:db8:1:2:aaaa::1", &v6->sin6_addr);
  EXPECT_EQ(SourceKey(s, sizeof(sockaddr_in6)), "2001:db8:1:2::/64");
  inet_pton(AF_INET6, "2001:db8:1:2:bbbb::7", &v6->sin6_addr);
  EXPECT_EQ(SourceKey(s, sizeof(sockaddr_in6)), "2001:db8:1:2::/64");
  inet_pton(AF_INET6, "::ffff:127.0.0.2", &v6->sin6_addr);
  EXPECT_EQ(SourceKey(s, sizeof(sockaddr_in6)), "127.0.0.2");
  sockaddr_storage t{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&t);
  v4->sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.3", &v4->sin_addr);
  EXPECT_EQ(SourceKey(t, sizeof(sockaddr_in)), "127.0.0.3");
  EXPECT_EQ(SourceKey(t, 2), "other");
}

}  // namespace
}  // namespace refit
