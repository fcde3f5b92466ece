// frame_relay: latency and loss on one link of a network-namespace test
// host, where the kernel has no netem. It forwards Ethernet frames between
// two interfaces of the namespace it runs in (AF_PACKET sockets; netns.sh
// puts it between a host's veth and the bridge), holding each frame
// `--delay_ms` (plus up to `--jitter_ms`, order kept) and dropping each with
// probability `--loss`, so TCP on the host sees real delay and real
// retransmissions. IPv4 TCP/UDP checksums are recomputed (a veth leaves
// them to offload). Frames must not exceed the MTU: netns.sh turns off the
// host's segmentation offload (gso_max_segs 1).
//
// Flags: --a=IFACE --b=IFACE --delay_ms=D (0) --jitter_ms=J (0)
//   --loss=P (0..1, 0) --seed=S (1) --duration_s=T (600: exits after T s)
// Prints "relay ready" once both sockets are bound, and at exit (SIGTERM,
// SIGINT or T) "relay a->b forwarded=N dropped=N b->a forwarded=N
// dropped=N". Exit 1 on a socket error.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "testing/netns/dash_flags.h"

namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

constexpr size_t kMaxQueued = 20000;  // frames per direction; beyond: dropped

// Opens a packet socket bound to `iface` (every protocol), or -1.
int OpenPacketSocket(const std::string& iface) {
  const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (fd < 0) return -1;
  sockaddr_ll a{};
  a.sll_family = AF_PACKET;
  a.sll_protocol = htons(ETH_P_ALL);
  a.sll_ifindex = static_cast<int>(if_nametoindex(iface.c_str()));
  int one = 1;
#ifdef PACKET_IGNORE_OUTGOING
  setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one));
#endif
  (void)one;
  if (a.sll_ifindex == 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

uint32_t Sum16(const uint8_t* p, size_t n, uint32_t sum) {
  for (; n > 1; p += 2, n -= 2) sum += (p[0] << 8) | p[1];
  if (n == 1) sum += p[0] << 8;
  return sum;
}
uint16_t Fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// Recomputes the TCP or UDP checksum of an IPv4 frame (no VLAN tag).
void FixChecksum(std::vector<uint8_t>& f) {
  if (f.size() < 14 + 20 || f[12] != 0x08 || f[13] != 0x00) return;
  uint8_t* ip = f.data() + 14;
  const size_t ihl = (ip[0] & 0x0f) * 4u;
  const size_t total = (ip[2] << 8) | ip[3];
  if ((ip[0] >> 4) != 4 || ihl < 20 || total < ihl || 14 + total > f.size()) return;
  if (((ip[6] & 0x1f) | ip[7]) != 0) return;  // a fragment: leave it
  const uint8_t proto = ip[9];
  const size_t len = total - ihl;
  uint8_t* l4 = ip + ihl;
  size_t at;
  if (proto == IPPROTO_TCP && len >= 20) {
    at = 16;
  } else if (proto == IPPROTO_UDP && len >= 8) {
    at = 6;
  } else {
    return;
  }
  l4[at] = l4[at + 1] = 0;
  uint32_t sum = Sum16(ip + 12, 8, 0);  // source and destination addresses
  sum += proto;
  sum += static_cast<uint32_t>(len);
  uint16_t c = Fold(Sum16(l4, len, sum));
  if (proto == IPPROTO_UDP && c == 0) c = 0xffff;
  l4[at] = c >> 8;
  l4[at + 1] = c & 0xff;
}

struct Frame {
  absl::Time release;
  std::vector<uint8_t> bytes;
};

struct Direction {
  int from = -1, to = -1;
  std::deque<Frame> queue;
  absl::Time last_release = absl::InfinitePast();
  int64_t forwarded = 0, dropped = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> f = refit::DashFlags(argc, argv);
  double delay_ms = 0, jitter_ms = 0, loss = 0, duration_s = 600;
  int64_t seed = 1;
  if ((f.count("delay_ms") && !absl::SimpleAtod(f["delay_ms"], &delay_ms)) ||
      (f.count("jitter_ms") && !absl::SimpleAtod(f["jitter_ms"], &jitter_ms)) ||
      (f.count("loss") && !absl::SimpleAtod(f["loss"], &loss)) ||
      (f.count("duration_s") && !absl::SimpleAtod(f["duration_s"], &duration_s)) ||
      (f.count("seed") && !absl::SimpleAtoi(f["seed"], &seed)) || loss < 0 || loss > 1 ||
      delay_ms < 0 || jitter_ms < 0 || f["a"].empty() || f["b"].empty()) {
    std::fprintf(stderr, "usage: frame_relay --a=IFACE --b=IFACE [--delay_ms=D] "
                         "[--jitter_ms=J] [--loss=0..1] [--seed=S] [--duration_s=T]\n");
    return 2;
  }
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  Direction dirs[2];
  dirs[0].from = dirs[1].to = OpenPacketSocket(f["a"]);
  dirs[0].to = dirs[1].from = OpenPacketSocket(f["b"]);
  if (dirs[0].from < 0 || dirs[0].to < 0) {
    std::fprintf(stderr, "frame_relay: cannot open packet sockets on %s, %s: %s\n",
                 f["a"].c_str(), f["b"].c_str(), std::strerror(errno));
    return 1;
  }
  std::printf("relay ready\n");
  std::fflush(stdout);
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const absl::Time end = absl::Now() + absl::Seconds(duration_s);
  std::vector<uint8_t> buf(65536 + 64);
  while (!g_stop && absl::Now() < end) {
    // Sleep until a frame arrives or the next one is due (at most 100 ms).
    absl::Time next = absl::Now() + absl::Milliseconds(100);
    for (Direction& d : dirs) {
      if (!d.queue.empty()) next = std::min(next, d.queue.front().release);
    }
    pollfd p[2] = {{dirs[0].from, POLLIN, 0}, {dirs[1].from, POLLIN, 0}};
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(next - absl::Now()));
    if (poll(p, 2, static_cast<int>(ms)) < 0 && errno != EINTR) return 1;
    const absl::Time now = absl::Now();
    for (int i = 0; i < 2; ++i) {
      Direction& d = dirs[i];
      for (int n = 0; n < 256; ++n) {  // bounded per wake-up
        const ssize_t got = recv(d.from, buf.data(), buf.size(), 0);
        if (got <= 0) break;
        if (unit(rng) < loss || d.queue.size() >= kMaxQueued) {
          ++d.dropped;
          continue;
        }
        absl::Time at = now + absl::Milliseconds(delay_ms + jitter_ms * unit(rng));
        at = std::max(at, d.last_release);  // keep order
        d.last_release = at;
        d.queue.push_back({at, std::vector<uint8_t>(buf.begin(), buf.begin() + got)});
      }
      while (!d.queue.empty() && d.queue.front().release <= absl::Now()) {
        Frame& fr = d.queue.front();
        FixChecksum(fr.bytes);
        if (send(d.to, fr.bytes.data(), fr.bytes.size(), 0) < 0) {
          if (errno == EAGAIN) break;
          ++d.dropped;  // e.g. larger than the MTU
        } else {
          ++d.forwarded;
        }
        d.queue.pop_front();
      }
    }
  }
  std::printf("relay a->b forwarded=%lld dropped=%lld b->a forwarded=%lld dropped=%lld\n",
              static_cast<long long>(dirs[0].forwarded), static_cast<long long>(dirs[0].dropped),
              static_cast<long long>(dirs[1].forwarded), static_cast<long long>(dirs[1].dropped));
  return 0;
}
