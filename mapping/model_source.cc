// ModelConfigPath (see model_source.h).
#include "mapping/model_source.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace refit {
namespace {

namespace fs = std::filesystem;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

bool IsFile(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

bool IsDir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

// The snapshot refs/main names, if it holds a config.json.
std::string MainSnapshotConfig(const std::string& repo) {
  std::ifstream ref(repo + "/refs/main");
  std::string rev;
  if (!std::getline(ref, rev)) return "";
  rev = std::string(absl::StripAsciiWhitespace(rev));
  const std::string path = absl::StrCat(repo, "/snapshots/", rev, "/config.json");
  return rev.empty() || !IsFile(path) ? "" : path;
}

// The config.json of the most recently written snapshot that has one.
std::string NewestSnapshotConfig(const std::string& repo) {
  std::error_code ec;
  std::string best;
  fs::file_time_type best_time;
  for (const fs::directory_entry& e : fs::directory_iterator(repo + "/snapshots", ec)) {
    const std::string path = (e.path() / "config.json").string();
    if (!IsFile(path)) continue;
    std::error_code tec;
    const fs::file_time_type t = fs::last_write_time(e.path(), tec);
    if (best.empty() || (!tec && t > best_time)) {
      best = path;
      best_time = t;
    }
  }
  return best;
}

}  // namespace

std::string HuggingFaceHubCache() {
  if (std::string v = Env("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = Env("HUGGINGFACE_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = Env("HF_HOME"); !v.empty()) return v + "/hub";
  if (std::string v = Env("XDG_CACHE_HOME"); !v.empty()) return v + "/huggingface/hub";
  return Env("HOME") + "/.cache/huggingface/hub";
}

bool LooksLikePath(const std::string& model) {
  if (model.empty()) return true;
  if (model[0] == '/' || model[0] == '.' || model[0] == '~') return true;
  if (absl::EndsWith(model, ".json")) return true;
  return std::count(model.begin(), model.end(), '/') > 1;
}

absl::StatusOr<std::string> ModelConfigPath(const std::string& model) {
  std::error_code ec;
  // A file, or something else there that is no directory (a device, a
  // FIFO): reading it says what it is.
  if (IsFile(model) || (fs::exists(model, ec) && !IsDir(model))) return model;
  if (IsDir(model)) {
    const std::string path = absl::StrCat(absl::StripSuffix(model, "/"), "/config.json");
    if (IsFile(path)) return path;
    return absl::NotFoundError(absl::StrCat("model ", model, ": the directory has no config.json"));
  }
  if (LooksLikePath(model)) {
    return absl::NotFoundError(absl::StrCat("model ", model, ": no such file"));
  }
  const std::string cache = HuggingFaceHubCache();
  const std::string repo =
      absl::StrCat(cache, "/models--", absl::StrReplaceAll(model, {{"/", "--"}}));
  if (IsDir(repo)) {
    if (std::string p = MainSnapshotConfig(repo); !p.empty()) return p;
    if (std::string p = NewestSnapshotConfig(repo); !p.empty()) return p;
  }
  return absl::NotFoundError(absl::StrCat(
      "model ", model, ": not a file, and not a Hugging Face id in the local cache (no ",
      repo, "/snapshots/*/config.json; HF_HUB_CACHE or HF_HOME choose the cache; "
      "`huggingface-cli download ", model, " config.json` fills it)"));
}

}  // namespace refit
