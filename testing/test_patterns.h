// Test patterns for the data plane: small trainer/engine layouts (1->1,
// 2->2 with a different layout, 1->3, 3->1, replicated destinations, fused
// qkv / w13 destinations with a Megatron-style interleaved source, trainer
// PP stages), a hand-made plan builder (until the planner is used here),
// and deterministic fill / check helpers. Shared by the in-process executor
// test and the multi-process Gloo test.
#ifndef REFIT_TESTING_TEST_PATTERNS_H_
#define REFIT_TESTING_TEST_PATTERNS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/plan.h"

namespace refit::testing {

// Names accepted by MakePatternPlan ("relay": built by BuildPlan with
// relays, engine replicas forwarding to each other).
std::vector<std::string> PatternNames();

// The plan of pattern `name`: segments = intersections of each destination
// record with the source records (sources partition each tensor); one
// round per (source stage, chunk) with `rounds_per_stage` chunks of
// tensors, on lane stage % num_lanes (round-robin over chunks); messages
// flagged contiguous where one segment is one byte range.
// INVALID_ARGUMENT for an unknown name.
absl::StatusOr<Plan> MakePatternPlan(const std::string& name,
                                     int32_t num_lanes = 2,
                                     int32_t rounds_per_stage = 2);

// Hand-made plan for arbitrary layouts (same rules as above).
Plan MakeHandPlan(const SideLayout& src, const SideLayout& dst,
                  int32_t num_lanes, int32_t rounds_per_stage);

// Allocates this rank's buffers of `side` (null for other ranks'), filled
// with `fill` bytes.
std::vector<std::vector<char>> AllocateRankBuffers(const SideLayout& side,
                                                   int32_t rank, char fill);
std::vector<char*> Pointers(std::vector<std::vector<char>>& bufs);

// Writes the value of every element of every record of `rank` (a function
// of tensor name, element index, byte and `step`) into its buffers.
void FillRecords(const SideLayout& side, int32_t rank, uint64_t step,
                 std::vector<std::vector<char>>* bufs);

// Returns "" if every record byte of `rank` holds the value of `step` and
// every unclaimed byte still holds `fill`; else a description of the first
// wrong byte (tensor, buffer, offset).
std::string CheckRecords(const SideLayout& side, int32_t rank, uint64_t step,
                         char fill, const std::vector<std::vector<char>>& bufs);

}  // namespace refit::testing

#endif  // REFIT_TESTING_TEST_PATTERNS_H_
