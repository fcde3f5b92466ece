// Where a model named by the user (--model, MemberOptions::model, the
// Python `model=`) keeps its config.json, when it is not a built-in name:
// a config.json path, a directory holding one (a downloaded checkpoint), or
// a Hugging Face id ("Qwen/Qwen3-8B") found in the local Hugging Face cache,
// the one the engine loaded the model from. Nothing is downloaded.
#ifndef REFIT_MAPPING_MODEL_SOURCE_H_
#define REFIT_MAPPING_MODEL_SOURCE_H_

#include <string>

#include "absl/status/statusor.h"

namespace refit {

// The local Hugging Face hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (what
// huggingface_hub itself uses).
std::string HuggingFaceHubCache();

// Returns the config.json path `model` names: `model` itself when it is a
// file (or anything there but a directory: reading it says what it is); `model`/config.json when it is a directory holding one; for a
// Hugging Face id ("Org/Name" or "Name"), the cached snapshot's config.json,
// HuggingFaceHubCache()/models--Org--Name/snapshots/<rev>/config.json, the
// revision refs/main names, else the newest snapshot that has one. Fails
// with NOT_FOUND: "no such file" for a path (one that starts with / . ~ or
// ends in .json, or has more than one '/'); for an id, naming the cache
// folder looked in and how to fill it.
absl::StatusOr<std::string> ModelConfigPath(const std::string& model);

// True when `model` can only be a path (see ModelConfigPath), not an id.
bool LooksLikePath(const std::string& model);

}  // namespace refit

#endif  // REFIT_MAPPING_MODEL_SOURCE_H_
