// HTTP/2 by hand for adversarial tests that speak to a refitd child over
// raw sockets: connections from a chosen loopback address, frames, HPACK
// literals, and the gRPC request headers; and what such tests measure of
// the child (CPU time) or need of their own process (descriptors).
// Test-only.
#ifndef REFIT_TESTS_ADVERSARIAL_H2_WIRE_H_
#define REFIT_TESTS_ADVERSARIAL_H2_WIRE_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace refit::testing {

// The HTTP/2 client connection preface.
inline constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Returns a blocking TCP connection to 127.0.0.1:`port` made from `source`
// (a loopback address such as "127.0.0.2"; empty: the kernel's choice);
// -1 when it failed.
int Dial(int port, const std::string& source = "");

// Sends all of `bytes`; returns false when the connection failed first.
bool SendAll(int fd, const std::string& bytes);

// Returns an HTTP/2 frame; its header announces `announced` bytes when given
// (to stall mid-frame), else the payload's size.
std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload,
                  size_t announced = std::string::npos);

// Returns an HPACK literal header field without indexing, new name, no
// Huffman coding.
std::string Header(const std::string& name, const std::string& value);

// Returns the header block of a gRPC call to refit.v1.RefitService/`method`,
// with grpc-encoding `encoding` when not empty.
std::string GrpcHeaders(const std::string& method, const std::string& encoding);

// Returns the CPU seconds (user + system) process `pid` has used; -1 when
// unknown.
double CpuSeconds(pid_t pid);

// Raises this process's soft open-file limit to its hard limit.
void RaiseOwnFdLimit();

}  // namespace refit::testing

#endif  // REFIT_TESTS_ADVERSARIAL_H2_WIRE_H_
