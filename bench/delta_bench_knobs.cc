// delta_bench's knobs (see delta_bench_knobs.h).
#include "bench/delta_bench_knobs.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace refit {

const char* const kKnobsUsage =
    "[--snapshot=gpu|pinned] [--staging_mib=N] [--warm_ms=N] [--trace] "
    "[--lanes=1|2|3|4] [--deadline_s=N]";

namespace {

// The value of `--name=` in `arg` as a count (false: another flag or not
// a non-negative integer).
bool CountFlag(const std::string& arg, const std::string& name, int64_t* v) {
  const std::string prefix = absl::StrCat("--", name, "=");
  return arg.rfind(prefix, 0) == 0 && absl::SimpleAtoi(arg.substr(prefix.size()), v) && *v >= 0;
}

}  // namespace

bool ParseKnob(const std::string& a, Knobs* k) {
  int64_t v = 0;
  if (a == "--snapshot=pinned" || a == "--snapshot=gpu") {
    k->snapshot = a == "--snapshot=gpu" ? SnapshotMemory::kDevice : SnapshotMemory::kPinnedHost;
  } else if (CountFlag(a, "staging_mib", &v) && v >= 1) {
    k->staging_bytes = v << 20;
  } else if (CountFlag(a, "warm_ms", &v)) {
    k->warm_ms = static_cast<double>(v);
  } else if (a == "--trace") {
    k->trace = true;
  } else if (CountFlag(a, "lanes", &v) && v >= 1 && v <= 4) {
    k->lanes = static_cast<int>(v);
  } else if (CountFlag(a, "deadline_s", &v)) {
    k->deadline_s = v;
  } else {
    return false;
  }
  return true;
}

std::string DescribeKnobs(const Knobs& k) {
  return absl::StrCat(
      "snapshot in ", k.snapshot == SnapshotMemory::kDevice ? "GPU memory" : "pinned host memory",
      ", ", k.lanes, " lanes, a staging budget of ", k.staging_bytes >> 20,
      " MiB (batches of up to ", k.staging_bytes / k.lanes / 2 >> 20, " MiB), trainer GPU warmed ",
      k.warm_ms, " ms");
}

}  // namespace refit
