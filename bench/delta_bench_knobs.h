// delta_bench's knobs of the delta path (its flags): where the snapshot
// lives, the plan's staging budget (which sizes the batches) and lanes, how long it warms the trainer GPU,
// whether it traces the batches.
#ifndef REFIT_BENCH_DELTA_BENCH_KNOBS_H_
#define REFIT_BENCH_DELTA_BENCH_KNOBS_H_

#include <cstdint>
#include <string>

#include "exec/delta/delta_runner.h"
#include "exec/delta/wave_ops.h"

namespace refit {

struct Knobs {
  SnapshotMemory snapshot = SnapshotMemory::kDevice;
  int64_t staging_bytes = PlannerOptions().staging_budget_bytes;
  // The trainer GPU reads its weights for this long right before each
  // delta round, as a trainer's GPU is busy (its optimizer step) right
  // before a refit: an idle GPU's first milliseconds of work run slower.
  double warm_ms = 50;
  bool trace = false;  // each row's batches, step by step
  int lanes = 2;       // the plan's lanes (1 .. 4)
  int64_t deadline_s = 60;  // each member's setup and each round
};

// The knobs' flags, for a usage line.
extern const char* const kKnobsUsage;

// Sets the knob flag `arg` names (one of kKnobsUsage's); false when it
// names none or its value is not one the flag takes.
bool ParseKnob(const std::string& arg, Knobs* knobs);

// The knobs in words, for the bench's first line.
std::string DescribeKnobs(const Knobs& knobs);

}  // namespace refit

#endif  // REFIT_BENCH_DELTA_BENCH_KNOBS_H_
