// A delta round's receiver against a sender out of step with the staging
// budget (delta_room.h): an in-process transport, the sender's side
// written by hand.
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "exec/delta/delta_codec.h"
#include "exec/delta/delta_runner.h"
#include "exec/transport/inproc_transport.h"
#include "gtest/gtest.h"
#include "layout/mesh.h"
#include "layout/sharding.h"
#include "plan/planner.h"
#include "testing/reference_copy.h"

namespace refit {
namespace {

// A sender that announces more encoded bytes than its share of the
// receiver's room (a peer out of step, or hostile): the receiver refuses
// before it receives a payload byte, naming the message and the sender,
// within the round's deadline.
TEST(DeltaRunner, AnEngineRefusesEncodingsPastItsRoomNamingTheSender) {
  SideLayout src, dst;
  src.world_size = dst.world_size = 1;
  const Mesh one = *Mesh::Make({"tp"}, {1});
  TensorSpec spec{"layers.0.w", {64, 64}, DType::kBF16};
  ASSERT_TRUE(AddTensor(src, spec).ok());
  ASSERT_TRUE(AddTensor(dst, spec).ok());
  ASSERT_TRUE(AddDenseShards(src, 0, one, {Placement::Replicate()}).ok());
  ASSERT_TRUE(AddDenseShards(dst, 0, one, {Placement::Replicate()}).ok());
  PlannerOptions o;
  o.num_lanes = 1;
  o.choose_lanes = false;
  const Plan plan = BuildPlan(src, dst, o).value();
  auto fabric = InProcFabric::Create(2, 1).value();
  auto trainer = InProcTransport::Create(fabric, 0).value();
  auto engine = InProcTransport::Create(fabric, 1).value();
  OwnedBuffers b = AllocateBuffers(plan.dst, 0);
  std::vector<char*> p;
  for (auto& x : b.storage) p.push_back(reinterpret_cast<char*>(x.data()));
  auto r = DeltaRunner::Create(plan, Side::kEngine, 0, p, engine.get());
  ASSERT_TRUE(r.ok()) << r.status();
  (*r)->Begin({2, {1}, false});
  // The sender: its byte of the lane's first exchange, then every
  // message's header as all of its words changed, in indices (3x a BF16
  // message's bytes).
  std::vector<DeltaHeader> headers;
  for (const Message& m : plan.messages) {
    DeltaHeader h;
    h.encoding = static_cast<uint8_t>(DeltaEncoding::kIndices);
    h.word_bytes = 2;
    h.num_words = h.num_changed = static_cast<uint64_t>(m.bytes / 2);
    h.payload_bytes = static_cast<uint64_t>(
        DeltaPayloadBytes(DeltaEncoding::kIndices, 2, m.bytes / 2, m.bytes / 2));
    headers.push_back(h);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  std::thread sender([&] {
    const char one_byte = 1;
    if (!trainer->StartWave(0, {{1, &one_byte, 1}}, {}, deadline).ok()) return;
    (void)trainer->WaitWave(0, deadline);
    SendOp head{1, headers.data(), static_cast<int64_t>(headers.size() * sizeof(DeltaHeader))};
    if (!trainer->StartWave(0, {head}, {}, deadline).ok()) return;
    (void)trainer->WaitWave(0, deadline);
  });
  absl::StatusOr<RunStats> run = (*r)->Run(deadline);
  sender.join();
  ASSERT_TRUE(absl::IsDataLoss(run.status())) << run.status();
  EXPECT_TRUE(absl::StrContains(run.status().message(), "from trainer rank 0")) << run.status();
  EXPECT_TRUE(absl::StrContains(run.status().message(), "staging budget")) << run.status();
  EXPECT_LT(absl::Now(), deadline);
  // Not a byte of the engine changed.
  for (auto& x : b.storage) {
    for (uint8_t v : x) ASSERT_EQ(v, 0);
  }
}

}  // namespace
}  // namespace refit
