#include "cli/safetensors.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace refit {
namespace {

std::string TmpPath(const std::string& name) {
  const char* d = std::getenv("TEST_TMPDIR");
  return std::string(d != nullptr ? d : "/tmp") + "/" + name;
}

// Writes a raw safetensors file from header JSON and data bytes.
void WriteRaw(const std::string& path, const std::string& header,
              const std::string& data, int64_t claimed_len = -1) {
  std::ofstream out(path, std::ios::binary);
  uint64_t n = claimed_len >= 0 ? claimed_len : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << header << data;
}

TEST(SafetensorsTest, RoundTripsBytesShapesDtypesAndMetadata) {
  std::vector<uint8_t> a(2 * 3 * 2), b(5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(200 + i);
  const std::string path = TmpPath("rt.safetensors");
  std::vector<SafetensorsTensor> ts = {
      {"w.weight", DType::kBF16, {2, 3}, a},
      {"s", DType::kF8E4M3, {5}, b}};
  ASSERT_TRUE(WriteSafetensors(path, ts, {{"format", "pt"}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->entries().size(), 2u);
  const SafetensorsEntry* w = (*f)->Find("w.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kBF16);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::vector<uint8_t>(w->data.begin(), w->data.end()), a);
  const SafetensorsEntry* s = (*f)->Find("s");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->dtype, DType::kF8E4M3);
  EXPECT_EQ(std::vector<uint8_t>(s->data.begin(), s->data.end()), b);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  EXPECT_EQ((*f)->Find("missing"), nullptr);
}

TEST(SafetensorsTest, WriteRejectsSizeDisagreeingWithShape) {
  std::vector<uint8_t> a(5);
  std::vector<SafetensorsTensor> ts = {{"bad.weight", DType::kBF16, {3}, a}};
  absl::Status st = WriteSafetensors(TmpPath("bad.safetensors"), ts);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bad.weight"), std::string::npos) << st;
}

TEST(SafetensorsTest, RejectsTruncatedData) {
  const std::string p = TmpPath("trunc.safetensors");
  WriteRaw(p, R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
           std::string(8, '\0'));
  auto f = SafetensorsFile::Open(p);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("tensor x"), std::string::npos)
      << f.status();
}

TEST(SafetensorsTest, RejectsHeaderLengthBeyondFile) {
  const std::string p = TmpPath("hdr.safetensors");
  WriteRaw(p, "{}", "", /*claimed_len=*/1000);
  auto f = SafetensorsFile::Open(p);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("header length"), std::string::npos)
      << f.status();
}

TEST(SafetensorsTest, RejectsSizeMismatchOverlapAndUnknownDtype) {
  const std::string p = TmpPath("bad2.safetensors");
  WriteRaw(p, R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})",
           std::string(16, '\0'));
  auto f = SafetensorsFile::Open(p);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("shape * dtype"), std::string::npos);

  WriteRaw(p,
           R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
           R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
           std::string(12, '\0'));
  f = SafetensorsFile::Open(p);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("overlap"), std::string::npos)
      << f.status();

  WriteRaw(p, R"({"q":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})",
           std::string(1, '\0'));
  f = SafetensorsFile::Open(p);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("tensor q"), std::string::npos)
      << f.status();

  WriteRaw(p, "not json", "");
  EXPECT_FALSE(SafetensorsFile::Open(p).ok());
  EXPECT_EQ(SafetensorsFile::Open(TmpPath("nope")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, ShardedCheckpointFindsTensorsThroughTheIndex) {
  const std::string dir = TmpPath("ckpt");
  std::remove((dir + "/model.safetensors.index.json").c_str());
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  std::vector<uint8_t> a(4, 1), b(4, 2);
  ASSERT_TRUE(WriteSafetensors(dir + "/a.safetensors",
                               {{"t.a", DType::kU8, {4}, a}}).ok());
  ASSERT_TRUE(WriteSafetensors(dir + "/b.safetensors",
                               {{"t.b", DType::kU8, {2, 2}, b}}).ok());
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"t.a":"a.safetensors","t.b":"b.safetensors"}})";
  auto c = SafetensorsCheckpoint::Open(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_tensors(), 2u);
  ASSERT_NE(c->Find("t.b"), nullptr);
  EXPECT_EQ(c->Find("t.b")->data[3], 2);
  EXPECT_EQ(c->Find("t.a")->data[0], 1);

  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"weight_map":{"t.c":"a.safetensors"}})";
  auto bad = SafetensorsCheckpoint::Open(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t.c"), std::string::npos)
      << bad.status();
}

TEST(SafetensorsTest, DirectoryWithOneFileOpensWithOrWithoutTrailingSlash) {
  const std::string dir = TmpPath("single_ckpt");
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  std::vector<uint8_t> a(4, 3);
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors",
                               {{"t.a", DType::kU8, {4}, a}}).ok());
  for (const std::string& path : {dir, dir + "/", dir + "//"}) {
    auto c = SafetensorsCheckpoint::Open(path);
    ASSERT_TRUE(c.ok()) << path << ": " << c.status();
    ASSERT_NE(c->Find("t.a"), nullptr);
    EXPECT_EQ(c->Find("t.a")->data[2], 3);
  }
  const std::string empty = TmpPath("empty_ckpt");
  ASSERT_EQ(system(("mkdir -p " + empty).c_str()), 0);
  auto none = SafetensorsCheckpoint::Open(empty + "/");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace refit
