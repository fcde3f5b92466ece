// ClassifyFirstBytes: what a connection's first bytes amount to.
#include "server/first_request.h"

#include <string>

#include "gtest/gtest.h"

namespace refit {
namespace {

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

std::string Frame(uint8_t type, uint8_t flags, const std::string& payload) {
  const size_t len = payload.size();
  return std::string{static_cast<char>(len >> 16), static_cast<char>(len >> 8),
                     static_cast<char>(len), static_cast<char>(type), static_cast<char>(flags),
                     0, 0, 0, 1} +
         payload;
}

FirstBytes Classify(const std::string& s, size_t limit = 1 << 16) {
  return ClassifyFirstBytes(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size()), limit);
}

TEST(FirstRequestTest, ARequestIsThePrefaceAndAWholeHeaderBlock) {
  const std::string preface = kPreface, settings = Frame(4, 0, "");
  EXPECT_EQ(Classify(preface.substr(0, 10)), FirstBytes::kIncomplete);
  EXPECT_EQ(Classify(preface), FirstBytes::kAwaitingRequest);
  EXPECT_EQ(Classify(preface + settings), FirstBytes::kAwaitingRequest);
  // HEADERS without END_HEADERS, then CONTINUATION with it.
  const std::string open = Frame(1, 0, std::string(40, 'h'));
  EXPECT_EQ(Classify(preface + settings + open), FirstBytes::kAwaitingRequest);
  EXPECT_EQ(Classify(preface + settings + open + Frame(9, 4, "cc")), FirstBytes::kRequest);
  EXPECT_EQ(Classify(preface + settings + Frame(1, 4 | 1, "hh")), FirstBytes::kRequest);
  // A header block cut mid-frame is no request yet.
  const std::string whole = preface + settings + Frame(1, 4, std::string(40, 'h'));
  EXPECT_EQ(Classify(whole.substr(0, whole.size() - 1)), FirstBytes::kAwaitingRequest);
}

TEST(FirstRequestTest, OtherBytesAndEndlessHeaderBlocksAreNamed) {
  EXPECT_EQ(Classify("GET / HTTP/1.1\r\n"), FirstBytes::kNotHttp2);
  EXPECT_EQ(Classify("\x16\x03\x01"), FirstBytes::kNotHttp2);  // a TLS hello
  // CONTINUATION frames that never end the block fill the limit.
  std::string flood = std::string(kPreface) + Frame(4, 0, "") + Frame(1, 0, "h");
  while (flood.size() < 4096) flood += Frame(9, 0, std::string(100, 'c'));
  EXPECT_EQ(Classify(flood, 4096), FirstBytes::kOversized);
  EXPECT_EQ(Classify(flood, 1 << 20), FirstBytes::kAwaitingRequest);
}

TEST(FirstRequestTest, OnTlsTheFirstRequestIsTheFirstWholeRecord) {
  // A handshake record of 6 bytes, its version 3.1.
  const std::string record = std::string("\x16\x03\x01\x00\x06", 5) + "hello!";
  auto tls = [](const std::string& s) {
    return ClassifyFirstTlsBytes(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  };
  EXPECT_EQ(tls(""), FirstBytes::kIncomplete);
  EXPECT_EQ(tls(record.substr(0, 3)), FirstBytes::kAwaitingRequest);
  EXPECT_EQ(tls(record.substr(0, 10)), FirstBytes::kAwaitingRequest);
  EXPECT_EQ(tls(record), FirstBytes::kRequest);
  EXPECT_EQ(tls(kPreface), FirstBytes::kNotHttp2);  // plaintext on a TLS port
}

}  // namespace
}  // namespace refit
