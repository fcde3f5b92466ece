// Fuzzing the safetensors reader (`refit simulate` maps checkpoints that a
// user points it at): a real file's header values — data offsets, shapes,
// dtypes, the header length — and bytes are mutated, and the file opened.
//
// The property: Open fails with a status, or every entry has exactly
// prod(shape) * dtype-size bytes, no two entries overlap, and every byte of
// every entry can be read (a range outside the mapping would fault here).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "common/file.h"
#include "layout/dtype.h"
#include "nlohmann/json.hpp"
#include "cli/safetensors.h"

namespace refit {
namespace {

using nlohmann::json;

std::string ReadAll(const std::string& path) {
  return ReadFileToString(path, int64_t{1} << 30).value_or("");
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

json EdgeNumber(std::mt19937_64& rng, int64_t v) {
  switch (rng() % 10) {
    case 0: return 0;
    case 1: return -1;
    case 2: return v + 1;
    case 3: return v - 1;
    case 4: return v * 2;
    case 5: return std::numeric_limits<int64_t>::max();
    case 6: return uint64_t{1} << 63;
    case 7: return 1.5;
    case 8: return "x";
    default: return static_cast<int64_t>(rng() % 600);
  }
}

// A mutant of the file `base`: its JSON header edited, or its bytes.
std::string Mutate(std::mt19937_64& rng, const std::string& base) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<uint8_t>(base[i])} << (8 * i);
  std::string data = base.substr(8 + n);
  const int kind = static_cast<int>(rng() % 6);
  if (kind == 0) {  // bytes
    std::string b = base;
    if (rng() % 2) {
      b.resize(rng() % b.size());
    } else {
      for (int k = 0; k < 3; ++k) b[rng() % b.size()] ^= 1 << (rng() % 8);
    }
    return b;
  }
  json h = json::parse(base.substr(8, n));
  std::vector<std::string> names;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() != "__metadata__") names.push_back(it.key());
  }
  json& t = h[names[rng() % names.size()]];
  if (kind == 1) {
    t["data_offsets"][rng() % 2] = EdgeNumber(rng, t["data_offsets"][0].get<int64_t>());
  } else if (kind == 2 && !t["shape"].empty()) {
    t["shape"][rng() % t["shape"].size()] = EdgeNumber(rng, t["shape"][0].get<int64_t>());
  } else if (kind == 3) {
    const char* dtypes[] = {"F32", "BF16", "U8", "F64", "XX", "I64"};
    t["dtype"] = dtypes[rng() % 6];
  } else if (kind == 4) {
    t.erase(rng() % 2 ? "shape" : "data_offsets");
  }
  std::string header = h.dump();
  uint64_t len = header.size();
  if (kind == 5) len = (rng() % 2) ? len + 1 + rng() % 64 : rng() % (len + 1);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(len >> (8 * i));
  return out + header + data;
}

TEST(SafetensorsFuzz, OpenedFilesOnlyExposeTheirOwnBytes) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string seed_path = dir + "/seed.safetensors";
  std::vector<uint8_t> a(4 * 6 * 2), b(3 * 4), c(16);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i);
  ASSERT_TRUE(WriteSafetensors(seed_path,
                               {{"a", DType::kBF16, {4, 6}, a},
                                {"b", DType::kF32, {3}, b},
                                {"c", DType::kU8, {2, 8}, c}},
                               {{"format", "pt"}})
                  .ok());
  const std::string base = ReadAll(seed_path);
  ASSERT_TRUE(SafetensorsFile::Open(seed_path).ok());
  std::mt19937_64 rng(20261123);
  int opened = 0, refused = 0;
  const std::string path = dir + "/mutant.safetensors";
  for (int i = 0; i < 3000; ++i) {
    WriteAll(path, Mutate(rng, base));
    auto f = SafetensorsFile::Open(path);
    if (!f.ok()) {
      ++refused;
      EXPECT_TRUE(absl::IsInvalidArgument(f.status())) << f.status();
      continue;
    }
    ++opened;
    std::vector<std::pair<const uint8_t*, const uint8_t*>> spans;
    for (const SafetensorsEntry& e : (*f)->entries()) {
      int64_t elements = 1;
      for (int64_t d : e.shape) elements *= d;
      ASSERT_EQ(static_cast<int64_t>(e.data.size()), elements * DTypeSize(e.dtype))
          << "mutant " << i << " tensor " << e.name;
      uint64_t sum = 0;
      for (uint8_t x : e.data) sum += x;  // faults if outside the mapping
      (void)sum;
      spans.push_back({e.data.data(), e.data.data() + e.data.size()});
    }
    std::sort(spans.begin(), spans.end());
    for (size_t k = 1; k < spans.size(); ++k) {
      ASSERT_LE(spans[k - 1].second, spans[k].first) << "mutant " << i << ": overlap";
    }
  }
  std::printf("safetensors: %d mutants opened (checked), %d refused\n", opened, refused);
  EXPECT_GT(opened, 50);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace refit
