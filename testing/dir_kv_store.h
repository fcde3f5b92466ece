// DirKvStore: a KvStore over a directory shared by the processes of one
// multi-process test (one file per key, written atomically by rename).
#ifndef REFIT_TESTING_DIR_KV_STORE_H_
#define REFIT_TESTING_DIR_KV_STORE_H_

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/file.h"
#include "exec/transport/kv_store.h"

namespace refit::testing {

class DirKvStore : public KvStore {
 public:
  explicit DirKvStore(std::string dir) : dir_(std::move(dir)) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    const std::string path = Path(key);
    const std::string tmp = absl::StrCat(path, ".tmp", getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(value.data(), value.size());
      if (!f) return absl::UnavailableError("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      return absl::UnavailableError("cannot rename " + tmp);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      absl::StatusOr<std::string> value =
          ReadFileToString(Path(key), int64_t{1} << 30);
      if (!absl::IsNotFound(value.status())) return value;
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError("key " + key + " not set in time");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  std::string Path(const std::string& key) const {
    return dir_ + "/" + absl::StrReplaceAll(key, {{"/", "_"}});
  }
  std::string dir_;
};

}  // namespace refit::testing

#endif  // REFIT_TESTING_DIR_KV_STORE_H_
