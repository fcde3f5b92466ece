// The relay checks (relay_checks.h) on host memory over the in-process
// transport: every rank a thread, the members' runners as refitd makes
// them. The same cases run on one GPU in relay_one_gpu_test.
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "exec/transport/inproc_transport.h"
#include "gtest/gtest.h"
#include "testing/relay_checks.h"

namespace refit {
namespace testing {
namespace {

MemberKit HostKit() {
  MemberKit k;
  k.parts = [](int32_t world, int32_t lanes) {
    std::shared_ptr<InProcFabric> fabric = InProcFabric::Create(world, lanes).value();
    DataPlaneParts p;
    p.transport = [fabric](KvStore*, int32_t rank, int32_t,
                           int32_t) -> absl::StatusOr<std::unique_ptr<Transport>> {
      auto t = InProcTransport::Create(fabric, rank);
      if (!t.ok()) return t.status();
      return std::unique_ptr<Transport>(std::move(*t));
    };
    return std::vector<DataPlaneParts>(world, p);
  };
  k.alloc = [](int64_t n) { return new char[n]; };
  k.write = [](char* to, const uint8_t* from, int64_t n) { std::memcpy(to, from, n); };
  k.read = [](uint8_t* to, const char* from, int64_t n) { std::memcpy(to, from, n); };
  k.free = [](char* p) { delete[] p; };
  return k;
}

TEST(RelayRoundsTest, DenseRoundsRelayEveryByteWithinTheBudget) {
  for (const RelayCase& c : DenseRelayCases()) {
    std::printf("%s\n", CheckDenseRelayRounds(HostKit(), c).c_str());
  }
}

// The host's in-process transport cannot be cancelled (Transport::Cancel
// does nothing there), so a cancelled dense relay would still run; the
// delta runner refuses to run once cancelled, so both stops apply.
TEST(RelayRoundsTest, DeltaRoundsRelayCatchAFlippedRelayByteAndAStoppedRelay) {
  for (const RelayCase& c : DeltaRelayCases()) {
    std::printf("%s\n", CheckDeltaRelayRounds(HostKit(), c).c_str());
  }
}

}  // namespace
}  // namespace testing
}  // namespace refit
