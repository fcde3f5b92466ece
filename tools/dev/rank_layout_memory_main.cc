// rank_layout_memory: what a client Member keeps of its side's layout, in
// resident memory. Builds one side of a model (--model, --side=trainer |
// engine, --convention) and prints the process's RSS with nothing built,
// holding the whole side (what a member kept before RankOnly), and holding
// only --rank's part (RankOnly: what a member keeps), after the whole side
// was freed.
//   rank_layout_memory --model=deepseek-v3 --side=trainer \
//       --convention=megatron:tp=1,pp=16,ep=16,etp=1,dp=16 --rank=0
#include <malloc.h>

#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "common/status_macros.h"
#include "mapping/mapping.h"
#include "testing/flags.h"
#include "testing/process_memory.h"

namespace refit {
namespace {

double RssMiB() { return testing::ReadProcessMemory().rss_mib; }

absl::StatusOr<MappedSide> Build(const std::string& model, bool trainer,
                                 const std::string& convention) {
  REFIT_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model));
  return BuildSideLayout(config, trainer, convention);
}

int Main(int argc, char** argv) {
  const std::string model = testing::FlagValue(argc, argv, "model", "deepseek-v3");
  const bool trainer = testing::FlagValue(argc, argv, "side", "trainer") == "trainer";
  const std::string convention = testing::FlagValue(
      argc, argv, "convention", "megatron:tp=1,pp=16,ep=16,etp=1,dp=16");
  int32_t rank = 0;
  if (!absl::SimpleAtoi(testing::FlagValue(argc, argv, "rank", "0"), &rank)) {
    std::fprintf(stderr, "--rank must be an integer\n");
    return 2;
  }
  const double base = RssMiB();
  absl::StatusOr<MappedSide> side = Build(model, trainer, convention);
  if (!side.ok()) {
    std::fprintf(stderr, "%s\n", side.status().ToString().c_str());
    return 1;
  }
  const double whole = RssMiB();
  const size_t records = side->layout.records.size();
  const size_t buffers = side->layout.buffers.size();
  MappedSide one = RankOnly(*std::move(side), rank);
  side = absl::InternalError("freed");
  const double kept = RssMiB();
  malloc_trim(0);
  const double trimmed = RssMiB();
  std::printf("%s %s %s rank %d\n", model.c_str(), trainer ? "trainer" : "engine",
              convention.c_str(), rank);
  std::printf("whole side: %zu buffers, %zu records; rank %d: %zu buffers, %zu records\n",
              buffers, records, rank, one.layout.buffers.size(),
              one.layout.records.size());
  std::printf("RSS MiB: start %.1f, holding the whole side %.1f (+%.1f), "
              "holding the rank only %.1f (+%.1f), after malloc_trim %.1f (+%.1f)\n",
              base, whole, whole - base, kept, kept - base, trimmed, trimmed - base);
  return 0;
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) { return refit::Main(argc, argv); }
