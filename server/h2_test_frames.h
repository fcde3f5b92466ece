// HTTP/2 bytes a test client sends: the connection preface and whole frames
// (RFC 9113 section 4.1), for the tests of what refitd reads from clients.
#ifndef REFIT_SERVER_H2_TEST_FRAMES_H_
#define REFIT_SERVER_H2_TEST_FRAMES_H_

#include <cstdint>
#include <string>

namespace refit::h2_test {

inline constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Returns one frame: the 9-byte header (length, type, flags, stream) then
// `payload`.
inline std::string Frame(uint8_t type, uint8_t flags, uint32_t stream,
                         const std::string& payload) {
  const size_t len = payload.size();
  return std::string{static_cast<char>(len >> 16), static_cast<char>(len >> 8),
                     static_cast<char>(len),       static_cast<char>(type),
                     static_cast<char>(flags),     static_cast<char>(stream >> 24),
                     static_cast<char>(stream >> 16), static_cast<char>(stream >> 8),
                     static_cast<char>(stream)} +
         payload;
}

}  // namespace refit::h2_test

#endif  // REFIT_SERVER_H2_TEST_FRAMES_H_
