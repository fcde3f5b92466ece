// `refit buffers` (see buffers_command.h).
#include "cli/buffers_command.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "layout/dtype.h"
#include "mapping/layout_builder.h"
#include "mapping/mapping.h"
#include "mapping/model_config.h"
#include "mapping/parallel_spec.h"
#include "mapping/split_advice.h"
#include "nlohmann/json.hpp"

namespace refit {

absl::StatusOr<std::string> RunBuffersCommand(const BuffersCommandOptions& opt) {
  if (opt.trainer.empty() == opt.engine.empty()) {
    return absl::InvalidArgumentError("give exactly one of --trainer and --engine");
  }
  REFIT_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig(opt.model));
  const bool trainer = !opt.trainer.empty();
  const std::string& convention = trainer ? opt.trainer : opt.engine;
  REFIT_ASSIGN_OR_RETURN(MappedSide side,
                         BuildSideLayoutExplained(model, trainer, convention));
  const int32_t world = side.layout.world_size;
  std::string text;
  if (opt.rank < -1 || opt.rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rank ", opt.rank, " is outside the world of ", world, " ranks of ",
        convention));
  }
  std::string kernel;  // engines: the kernel layout the buffers hold
  if (!trainer) {
    REFIT_ASSIGN_OR_RETURN(EngineSpec es, ParseEngineSpec(opt.engine));
    kernel = KernelTraits(es.kernel).summary;
    absl::StrAppend(&text, "kernel layout: ", kernel, "\n");
  }
  const int32_t first = opt.rank < 0 ? 0 : opt.rank;
  const int32_t last = opt.rank < 0 ? world : opt.rank + 1;
  nlohmann::json out = nlohmann::json::array();
  for (int32_t r = first; r < last; ++r) {
    const std::vector<LocalBuffer> bufs = RankBuffers(side, r);
    int64_t total = 0;
    for (const LocalBuffer& b : bufs) total += b.byte_size;
    absl::StrAppendFormat(&text, "%s rank %d of %d (%s, %s): %d buffers, %d bytes\n",
                          trainer ? "trainer" : "engine", r, world, convention,
                          opt.model, bufs.size(), total);
    nlohmann::json rows = nlohmann::json::array();
    for (const LocalBuffer& b : bufs) {
      const std::string shape = absl::StrCat("[", absl::StrJoin(b.shape, ", "), "]");
      absl::StrAppendFormat(&text, "  %-60s %-20s %-7s %d\n", b.name, shape,
                            DTypeName(b.dtype), b.byte_size);
      rows.push_back({{"name", b.name},
                      {"shape", b.shape},
                      {"dtype", std::string(DTypeName(b.dtype))},
                      {"bytes", b.byte_size}});
    }
    out.push_back({{"rank", r}, {"buffers", rows}});
  }
  return opt.json ? out.dump(1) + "\n" : text;
}

}  // namespace refit
