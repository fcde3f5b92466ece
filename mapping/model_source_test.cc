// A model named by a Hugging Face id is read from the local cache's
// snapshot (refs/main's, else the newest), a checkpoint directory from its
// config.json, and a missing path says "no such file" rather than listing
// the built-in models.
#include "mapping/model_source.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mapping/model_config.h"

namespace refit {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A fake hub cache under the test's temporary directory, as HF_HUB_CACHE.
class ModelSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / "model_source_test";
    fs::remove_all(root_);
    hub_ = root_ / "hub";
    fs::create_directories(hub_);
    setenv("HF_HUB_CACHE", hub_.c_str(), 1);
    tiny_ = *BuiltinModelJson("tiny-qwen3");
  }
  void TearDown() override { unsetenv("HF_HUB_CACHE"); }

  fs::path root_, hub_;
  std::string tiny_;
};

TEST_F(ModelSourceTest, HubCacheFollowsTheEnvironment) {
  EXPECT_EQ(HuggingFaceHubCache(), hub_.string());
  unsetenv("HF_HUB_CACHE");
  setenv("HF_HOME", "/data/hf", 1);
  EXPECT_EQ(HuggingFaceHubCache(), "/data/hf/hub");
  unsetenv("HF_HOME");
}

TEST_F(ModelSourceTest, AHuggingFaceIdIsReadFromRefsMainsSnapshot) {
  const fs::path repo = hub_ / "models--Org--Tiny-Model";
  Write(repo / "refs/main", "abc123\n");
  Write(repo / "snapshots/abc123/config.json", tiny_);
  Write(repo / "snapshots/old999/config.json", "{not json");
  absl::StatusOr<std::string> path = ModelConfigPath("Org/Tiny-Model");
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, (repo / "snapshots/abc123/config.json").string());
  absl::StatusOr<ModelConfig> c = LoadModelConfig("Org/Tiny-Model");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_layers, LoadModelConfig("tiny-qwen3")->num_layers);
}

TEST_F(ModelSourceTest, WithoutRefsTheSnapshotHoldingAConfigIsTaken) {
  const fs::path repo = hub_ / "models--Org--NoRefs";
  Write(repo / "snapshots/rev1/config.json", tiny_);
  fs::create_directories(repo / "snapshots/rev2");  // a partial download
  absl::StatusOr<std::string> path = ModelConfigPath("Org/NoRefs");
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, (repo / "snapshots/rev1/config.json").string());
}

TEST_F(ModelSourceTest, AnIdNotInTheCacheNamesTheCache) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig("Qwen/Qwen3-8B");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr(hub_.string() + "/models--Qwen--Qwen3-8B"));
  EXPECT_THAT(c.status().message(), HasSubstr("HF_HUB_CACHE"));
  EXPECT_THAT(c.status().message(), Not(HasSubstr("tiny-qwen3,")));
}

TEST_F(ModelSourceTest, ACheckpointDirectoryIsReadFromItsConfig) {
  Write(root_ / "ckpt/config.json", tiny_);
  absl::StatusOr<ModelConfig> c = LoadModelConfig((root_ / "ckpt").string());
  ASSERT_TRUE(c.ok()) << c.status();
  fs::create_directories(root_ / "empty");
  c = LoadModelConfig((root_ / "empty").string());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("has no config.json"));
}

TEST_F(ModelSourceTest, AMissingPathSaysNoSuchFile) {
  for (const std::string missing :
       {(root_ / "nope/config.json").string(), std::string("config.json"),
        std::string("./model/config.json"), std::string("a/b/c")}) {
    absl::StatusOr<ModelConfig> c = LoadModelConfig(missing);
    ASSERT_EQ(c.status().code(), absl::StatusCode::kNotFound) << missing;
    EXPECT_THAT(c.status().message(), HasSubstr("no such file")) << missing;
    EXPECT_THAT(c.status().message(), HasSubstr(missing));
    EXPECT_THAT(c.status().message(), Not(HasSubstr("tiny-qwen3"))) << missing;
  }
  // A plain name is most likely a misspelt built-in one: they are listed.
  absl::StatusOr<ModelConfig> c = LoadModelConfig("qwen3-8");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("qwen3-8b"));
}

}  // namespace
}  // namespace refit
