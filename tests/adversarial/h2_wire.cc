// HTTP/2 by hand (see h2_wire.h).
#include "tests/adversarial/h2_wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"

namespace refit::testing {

int Dial(int port, const std::string& source) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (!source.empty()) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    if (inet_pton(AF_INET, source.c_str(), &from.sin_addr) != 1 ||
        bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
      close(fd);
      return -1;
    }
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload,
                  size_t announced) {
  const size_t len = announced == std::string::npos ? payload.size() : announced;
  std::string f = {static_cast<char>(len >> 16), static_cast<char>(len >> 8),
                   static_cast<char>(len), static_cast<char>(type), static_cast<char>(flags),
                   static_cast<char>(stream >> 24), static_cast<char>(stream >> 16),
                   static_cast<char>(stream >> 8), static_cast<char>(stream)};
  return f + payload;
}

namespace {

// An HPACK string (no Huffman) with a 7-bit prefixed length.
std::string HpackString(const std::string& s) {
  std::string out;
  size_t v = s.size();
  if (v < 127) {
    out.push_back(static_cast<char>(v));
  } else {
    out.push_back(127);
    for (v -= 127; v >= 128; v >>= 7) out.push_back(static_cast<char>((v & 127) | 128));
    out.push_back(static_cast<char>(v));
  }
  return out + s;
}

}  // namespace

std::string Header(const std::string& name, const std::string& value) {
  return std::string(1, '\0') + HpackString(name) + HpackString(value);
}

std::string GrpcHeaders(const std::string& method, const std::string& encoding) {
  std::string block = Header(":method", "POST") + Header(":scheme", "http") +
                      Header(":path", absl::StrCat("/refit.v1.RefitService/", method)) +
                      Header(":authority", "127.0.0.1") +
                      Header("content-type", "application/grpc") + Header("te", "trailers");
  if (!encoding.empty()) block += Header("grpc-encoding", encoding);
  return block;
}

double CpuSeconds(pid_t pid) {
  absl::StatusOr<std::string> stat = ReadFileToString(absl::StrCat("/proc/", pid, "/stat"), 4096);
  if (!stat.ok()) return -1;
  const size_t close_paren = stat->rfind(')');
  if (close_paren == std::string::npos) return -1;
  std::vector<std::string> f = absl::StrSplit(stat->substr(close_paren + 2), ' ');
  if (f.size() < 13) return -1;  // fields from 3 on: utime is 14, stime 15
  return (std::stod(f[11]) + std::stod(f[12])) / sysconf(_SC_CLK_TCK);
}

void RaiseOwnFdLimit() {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
}

}  // namespace refit::testing
