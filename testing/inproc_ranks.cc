#include "testing/inproc_ranks.h"

#include <thread>

#include "exec/executor.h"
#include "exec/transport/inproc_transport.h"
#include "plan/plan_codec.h"

namespace refit::testing {

std::vector<absl::Status> RunAllRanksInProc(const Plan& full_plan, const OwnedBuffers& s,
                                            const OwnedBuffers& d, bool slices) {
  const Plan* plan = &full_plan;
  const int32_t ws = plan->src.world_size, wd = plan->dst.world_size;
  auto fabric = InProcFabric::Create(ws + wd, 2).value();
  std::vector<absl::Status> status(ws + wd);
  std::vector<std::thread> threads;
  for (int32_t g = 0; g < ws + wd; ++g) {
    threads.emplace_back([&, g] {
      const bool is_src = g < ws;
      std::vector<char*> ptrs;
      for (uint8_t* p : (is_src ? s : d).ptrs) ptrs.push_back(reinterpret_cast<char*>(p));
      auto t = InProcTransport::Create(fabric, g).value();
      // With slices, each rank runs its own slice off the wire.
      const Side side = is_src ? Side::kTrainer : Side::kEngine;
      const int32_t rank = is_src ? g : g - ws;
      absl::StatusOr<Plan> slice =
          slices ? FromProto(ToProto(ExtractSlice(*plan, side, rank))) : *plan;
      if (!slice.ok()) {
        status[g] = slice.status();
        fabric->Kill(g);
        return;
      }
      const SideLayout& full = is_src ? plan->src : plan->dst;
      const SideLayout& mine = is_src ? slice->src : slice->dst;
      std::vector<char*> local(mine.buffers.size(), nullptr);
      for (size_t b = 0; b < mine.buffers.size(); ++b) {
        if (mine.buffers[b].rank != rank || mine.buffers[b].scratch) continue;
        for (size_t k = 0; k < full.buffers.size(); ++k) {
          if (full.buffers[k].rank == rank && full.buffers[k].name == mine.buffers[b].name) {
            local[b] = ptrs[k];
          }
        }
      }
      auto ex = Executor::Create(*slice, side, rank, local, t.get());
      status[g] = ex.ok() ? (*ex)->Run(absl::Now() + absl::Seconds(60)).status() : ex.status();
      if (!status[g].ok()) fabric->Kill(g);
    });
  }
  for (auto& t : threads) t.join();
  return status;
}

}  // namespace refit::testing
