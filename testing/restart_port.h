// RestartablePort: a TCP port on 127.0.0.1 for a test that stops a server
// and starts it again on the same address. Test-only.
//
// A port of 0 comes from the kernel's ephemeral range, which every other
// process also draws from, for its own port-0 listeners and for the local
// end of each outgoing connection: in the gap between a stop and a restart
// another test could take it, and the restart would fail with EADDRINUSE.
// Ports below that range are handed out only to whoever names them.
#ifndef REFIT_TESTING_RESTART_PORT_H_
#define REFIT_TESTING_RESTART_PORT_H_

#include "absl/status/statusor.h"

namespace refit {

// Returns a port below /proc/sys/net/ipv4/ip_local_port_range (32768 when
// the file is missing) and at or above 10000 that 127.0.0.1 could bind a
// moment ago. UNAVAILABLE when 64 random tries found none free.
absl::StatusOr<int> RestartablePort();

}  // namespace refit

#endif  // REFIT_TESTING_RESTART_PORT_H_
