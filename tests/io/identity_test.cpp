#include "io/identity.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

namespace graft {
namespace {

using test::TempDir;

const char* kConfig = R"({"model_type": "qwen3", "vocab_size": 4})";

std::string IdentityOf(const std::string& dir) {
  auto c = Checkpoint::Open(dir);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  auto id = CachedIdentity(*c, "");
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return id.ok() ? id->identity : "";
}

// A one-tensor checkpoint in d (config + model.safetensors).
void WriteSmallCheckpoint(const TempDir& d) {
  test::WriteText(d.File("config.json"), kConfig);
  ASSERT_TRUE(WriteSafetensors(d.File("model.safetensors"), {test::F32Tensor("a", {2}, {1, 2})}).ok());
}

TEST(Identity, IndependentOfShardLayoutAndConfigWhitespace) {
  TempDir one, two;
  ASSERT_TRUE(WriteSafetensors(one.File("model.safetensors"),
                               {test::F32Tensor("a", {2}, {1, 2}), test::F32Tensor("b", {1}, {3})}).ok());
  test::WriteText(one.File("config.json"), kConfig);
  ASSERT_TRUE(WriteSafetensors(two.File("s2.safetensors"), {test::F32Tensor("a", {2}, {1, 2})}).ok());
  ASSERT_TRUE(WriteSafetensors(two.File("s1.safetensors"), {test::F32Tensor("b", {1}, {3})}).ok());
  test::WriteText(two.File("model.safetensors.index.json"), R"({"weight_map":{"a":"s2.safetensors","b":"s1.safetensors"}})");
  test::WriteText(two.File("config.json"), R"({ "vocab_size":4,
      "model_type":"qwen3" })");
  const std::string id = IdentityOf(one.path());
  EXPECT_EQ(id.size(), 64u);
  EXPECT_EQ(id, IdentityOf(two.path()));
}

TEST(Identity, ChangesWithAnyByteNameShapeOrConfig) {
  TempDir d;
  test::WriteText(d.File("config.json"), kConfig);
  auto write = [&](std::vector<TensorToWrite> t) { ASSERT_TRUE(WriteSafetensors(d.File("model.safetensors"), std::move(t)).ok()); };
  write({test::F32Tensor("a", {2}, {1, 2})});
  const std::string base = IdentityOf(d.path());
  write({test::F32Tensor("a", {2}, {1, 2.0000002f})});
  EXPECT_NE(IdentityOf(d.path()), base);
  write({test::F32Tensor("b", {2}, {1, 2})});
  EXPECT_NE(IdentityOf(d.path()), base);
  write({test::F32Tensor("a", {1, 2}, {1, 2})});
  EXPECT_NE(IdentityOf(d.path()), base);
  write({test::F32Tensor("a", {2}, {1, 2})});
  EXPECT_EQ(IdentityOf(d.path()), base);
  test::WriteText(d.File("config.json"), R"({"model_type": "qwen3", "vocab_size": 5})");
  EXPECT_NE(IdentityOf(d.path()), base);
}

TEST(Identity, CacheIsReusedAndInvalidatedByChanges) {
  TempDir d, cache;
  WriteSmallCheckpoint(d);
  {
    auto c = Checkpoint::Open(d.path());
    ASSERT_TRUE(c.ok());
    auto first = CachedIdentity(*c, cache.path());
    ASSERT_TRUE(first.ok());
    EXPECT_FALSE(first->from_cache);
    auto second = CachedIdentity(*c, cache.path());
    ASSERT_TRUE(second.ok());
    EXPECT_TRUE(second->from_cache);
    EXPECT_EQ(first->identity, second->identity);
  }
  ASSERT_TRUE(WriteSafetensors(d.File("model.safetensors"), {test::F32Tensor("a", {3}, {1, 2, 3})}).ok());
  auto c = Checkpoint::Open(d.path());
  ASSERT_TRUE(c.ok());
  auto third = CachedIdentity(*c, cache.path());
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->from_cache);
}

// A damaged cache file (fields of other types, or not an object) is recomputed, not thrown on
// (its "dir" as a number threw nlohmann's type_error out of CachedIdentity).
TEST(Identity, DamagedCacheFilesAreRecomputed) {
  TempDir d, cache;
  WriteSmallCheckpoint(d);
  auto c = Checkpoint::Open(d.path());
  ASSERT_TRUE(c.ok());
  auto first = CachedIdentity(*c, cache.path());
  ASSERT_TRUE(first.ok());
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(cache.path())) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  ASSERT_EQ(files.size(), 1u);
  for (const char* text : {R"({"dir": 5, "files": [], "identity": "x"})", R"({"dir": null})", "[1, 2]", R"("dir")",
                           R"({"identity": 7})"}) {
    test::WriteText(files[0].string(), text);
    auto again = CachedIdentity(*c, cache.path());
    ASSERT_TRUE(again.ok()) << text << ": " << again.status().ToString();
    EXPECT_FALSE(again->from_cache) << text;
    EXPECT_EQ(again->identity, first->identity) << text;
  }
}

}  // namespace
}  // namespace graft
