// Relay checks shared by the host and the GPU data planes: the planner's
// relays (PlannerOptions::relay: engine ranks forwarding, from their own
// buffers, bytes an earlier wave wrote) between engine replicas, each
// rank a member as refitd runs it (testing/member_rounds.h) over the data
// plane a MemberKit makes. Reports failures through gtest.
#ifndef REFIT_TESTING_RELAY_CHECKS_H_
#define REFIT_TESTING_RELAY_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/plan.h"
#include "testing/member_rounds.h"

namespace refit {
namespace testing {

// The plan of registry model `model` from a `trainer_spec` trainer on host
// 0 into a `engine_spec` engine whose replica i (dp, its ranks in order)
// is on host 1 + i, with relays, over `lanes` lanes under a staging budget
// of `budget` bytes (waves and messages a quarter of a lane's share, so
// that relays pipeline over many waves); `delta`: planned for delta rounds.
// Engines of several layouts (`engine_spec` "vllm:tp=2;vllm:tp=1,dp=2")
// are on host 1 together, the trainer alone on host 0.
// Fails with the model's, the specs' or the planner's error, or
// FAILED_PRECONDITION when the plan has no relay message.
absl::StatusOr<Plan> PlanWithRelays(const std::string& model, const std::string& trainer_spec,
                                    const std::string& engine_spec, int32_t lanes,
                                    int64_t budget, bool delta);

// What a relay check runs.
struct RelayCase {
  std::string model;
  std::string trainer_spec = "megatron:tp=1";
  std::string engine_spec;
  int32_t lanes = 2;
  int64_t budget = 1 << 20;
  // How the stopped relay stops (RankStop), each a round of its own.
  std::vector<RankStop> stops = {RankStop::kStalled, RankStop::kCancelled};
};

// The cases the host check (relay_rounds_test) and the one-GPU check
// (relay_one_gpu_test) both run: tiny-qwen3-moe-b128 from megatron:tp=1
// into BF16 and FP8 (quant=fp8: codes and scales relayed as bytes)
// replicas, TP1 and TP2, chains of depth 1 to 3, and (dense) a TP2 and a
// TP1 engine on one host from megatron:tp=1,dp=4, where the TP2 ranks
// carry parts of the TP1 ranks' tensors in; on one GPU every delta
// case's ranks keep their CUDA streams within 32 (cuda_inproc_parts.h),
// and only the last delta case stops a relay.
std::vector<RelayCase> DenseRelayCases();
std::vector<RelayCase> DeltaRelayCases();

// Dense rounds (the executor): two rounds, the second after 1% of the
// trainer's words changed; after each every byte of every engine rank
// equals the host reference, every engine rank's staging within the
// budget and the relays sent what the plan forwards. Returns one line of
// what they did.
std::string CheckDenseRelayRounds(const MemberKit& kit, const RelayCase& c);

// Delta and verified rounds (the delta runner): a dense round, a delta
// round of 1% changed words (every byte of every engine rank right, the
// digests agreeing, each rank within the staging budget, the relays
// forwarding); a byte flipped in a relay's buffer (a byte it forwards)
// fails the next verified round naming its engine rank and the tensor;
// the round after repairs every replica; a relay that stops (each of
// c.stops) fails the rank it feeds within the round's deadline naming the
// relay's global rank, and the round after commits with every byte right.
// Returns one line of what they did.
std::string CheckDeltaRelayRounds(const MemberKit& kit, const RelayCase& c);

}  // namespace testing
}  // namespace refit

#endif  // REFIT_TESTING_RELAY_CHECKS_H_
