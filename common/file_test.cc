#include "common/file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(ReadFileToStringTest, ReadsAWholeFileUpToTheCap) {
  const std::string bytes("{\"a\": 1}\n\0tail", 15);
  const std::string path = Write("whole", bytes);
  absl::StatusOr<std::string> got = ReadFileToString(path, 15);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bytes);
  got = ReadFileToString(Write("empty", ""), 0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "");
}

TEST(ReadFileToStringTest, RefusesAFileAboveTheCapNamingPathAndCap) {
  const std::string path = Write("large", std::string(100, 'x'));
  absl::StatusOr<std::string> got = ReadFileToString(path, 99);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr(path));
  EXPECT_THAT(got.status().message(), HasSubstr("99 bytes"));
}

TEST(ReadFileToStringTest, MissingFileIsNotFound) {
  absl::StatusOr<std::string> got = ReadFileToString(TempPath("no-such-file"), 10);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr("no-such-file"));
}

TEST(ReadFileToStringTest, RefusesDevicesDirectoriesAndFifos) {
  // /dev/zero never ends: refused before any byte is read.
  for (const std::string& path : {std::string("/dev/zero"), TempPath("")}) {
    absl::StatusOr<std::string> got = ReadFileToString(path, 1 << 20);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(got.status().message(), HasSubstr("not a regular file"));
  }
  // A FIFO without a writer: opening it must not wait for one.
  const std::string fifo = TempPath("fifo");
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  absl::StatusOr<std::string> got = ReadFileToString(fifo, 1 << 20);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr(fifo));
}

TEST(ReadFileToStringTest, ReadsFilesThatReportNoSize) {
  // /proc files are regular with st_size 0: read to EOF, within the cap.
  absl::StatusOr<std::string> got = ReadFileToString("/proc/self/status", 1 << 20);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, HasSubstr("VmRSS"));
  got = ReadFileToString("/proc/self/status", 16);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace refit
