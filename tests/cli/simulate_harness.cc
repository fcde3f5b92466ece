#include "tests/cli/simulate_harness.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

std::string RefitBinary() {
  const char* s = std::getenv("TEST_SRCDIR");
  const char* w = std::getenv("TEST_WORKSPACE");
  std::string p = absl::StrCat(s ? s : ".", "/", w ? w : "refit",
                               "/cli/refit");
  struct stat st;
  return stat(p.c_str(), &st) == 0 ? p : "cli/refit";
}

}  // namespace

std::string TmpDir(const std::string& name) {
  const char* d = std::getenv("TEST_TMPDIR");
  std::string p = std::string(d != nullptr ? d : "/tmp") + "/" + name;
  EXPECT_EQ(system(("rm -rf '" + p + "' && mkdir -p '" + p + "'").c_str()), 0);
  return p;
}

CmdResult RunRefit(const std::string& args) {
  CmdResult r;
  const std::string cmd = RefitBinary() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

Checkpoint MakeCheckpoint(const std::vector<TensorSpec>& tensors,
                          uint32_t seed) {
  std::mt19937 rng(seed);
  Checkpoint c;
  for (const TensorSpec& t : tensors) {
    std::vector<int64_t> shape = t.shape;
    int64_t members = 1;
    if (t.stacked) {
      members = shape[0];
      shape.erase(shape.begin());
    }
    int64_t n = DTypeSize(t.dtype);
    for (int64_t d : shape) n *= d;
    for (int64_t i = 0; i < members; ++i) {
      const std::string name = t.stacked ? MemberName(t, i) : t.name;
      std::vector<uint8_t> b(n);
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      if (t.dtype == DType::kBF16) {  // finite values (FP8 engines quantize them)
        for (int64_t k = 1; k < n; k += 2) {
          if ((b[k] & 0x7F) == 0x7F && (b[k - 1] & 0x80)) b[k] &= 0xBF;
        }
      }
      c.names.push_back(name);
      c.bytes[name] = std::move(b);
      c.meta[name] = {name, t.dtype, shape, {}};
    }
  }
  return c;
}

std::string WriteCheckpoint(const Checkpoint& c, const std::string& dir,
                            int shards, const std::string& skip,
                            const std::string& reshape) {
  std::vector<std::vector<SafetensorsTensor>> files(shards);
  std::string index = R"({"metadata":{},"weight_map":{)";
  int k = 0;
  for (const std::string& name : c.names) {
    if (name == skip) continue;
    SafetensorsTensor t = c.meta.at(name);
    t.data = c.bytes.at(name);
    if (name == reshape) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      t.shape = {n};
    }
    const int f = k++ % shards;
    absl::StrAppend(&index, k > 1 ? "," : "", "\"", name,
                    "\":\"model-0000", f + 1, ".safetensors\"");
    files[f].push_back(t);
  }
  index += "}}";
  if (shards == 1) {
    const std::string path = dir + "/model.safetensors";
    EXPECT_TRUE(WriteSafetensors(path, files[0]).ok());
    return path;
  }
  for (int f = 0; f < shards; ++f) {
    EXPECT_TRUE(WriteSafetensors(
                    absl::StrCat(dir, "/model-0000", f + 1, ".safetensors"),
                    files[f])
                    .ok());
  }
  std::ofstream(dir + "/model.safetensors.index.json") << index;
  return dir;
}

}  // namespace refit
