// The built-in model configs (configs/*.json), embedded into the binary by
// the genrule in BUILD (builtin_configs.cc). Internal to mapping/.
#ifndef REFIT_MAPPING_BUILTIN_CONFIGS_H_
#define REFIT_MAPPING_BUILTIN_CONFIGS_H_

namespace refit {
namespace internal_mapping {

struct BuiltinConfig {
  const char* name;  // file name without ".json"
  const char* json;  // the file's text
};
extern const BuiltinConfig kBuiltinConfigs[];
extern const int kNumBuiltinConfigs;

}  // namespace internal_mapping
}  // namespace refit

#endif  // REFIT_MAPPING_BUILTIN_CONFIGS_H_
