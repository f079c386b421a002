#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace graft {
namespace {

using test::TempDir;

// Two shards: a.safetensors {x, y}, b.safetensors {z}.
void WriteShards(const TempDir& d) {
  ASSERT_TRUE(WriteSafetensors(d.File("a.safetensors"), {test::F32Tensor("x", {2}, {1, 2}),
                                                         test::F32Tensor("y", {1}, {3})}).ok());
  ASSERT_TRUE(WriteSafetensors(d.File("b.safetensors"), {test::F32Tensor("z", {1}, {4})}).ok());
}

std::string OpenError(const std::string& dir) {
  auto c = Checkpoint::Open(dir);
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : c.status().ToString();
}

TEST(Checkpoint, ShardedIndexResolvesEveryTensor) {
  TempDir d;
  WriteShards(d);
  test::WriteText(d.File("model.safetensors.index.json"),
                  R"({"metadata":{"total_size":16},"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"}})");
  auto c = Checkpoint::Open(d.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->files().size(), 2u);
  EXPECT_EQ(c->All().size(), 3u);
  EXPECT_TRUE(c->Has("z"));
  EXPECT_EQ(c->total_bytes(), 16u);
}

TEST(Checkpoint, MissingShardIsNamed) {
  TempDir d;
  WriteShards(d);
  test::WriteText(d.File("model.safetensors.index.json"),
                  R"({"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors","w":"c.safetensors"}})");
  EXPECT_NE(OpenError(d.path()).find("shard 'c.safetensors' (holding 'w', per the index) is missing"),
            std::string::npos);
}

TEST(Checkpoint, TensorMissingFromItsShard) {
  TempDir d;
  WriteShards(d);
  test::WriteText(d.File("model.safetensors.index.json"),
                  R"({"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors","q":"b.safetensors"}})");
  EXPECT_NE(OpenError(d.path()).find("places tensor 'q' in shard 'b.safetensors', which does not hold it"),
            std::string::npos);
}

TEST(Checkpoint, TensorNotInIndex) {
  TempDir d;
  WriteShards(d);
  test::WriteText(d.File("model.safetensors.index.json"), R"({"weight_map":{"x":"a.safetensors","z":"b.safetensors"}})");
  EXPECT_NE(OpenError(d.path()).find("tensor 'y' in shard 'a.safetensors' is not in the index"), std::string::npos);
}

TEST(Checkpoint, TensorInTheWrongShard) {
  TempDir d;
  WriteShards(d);
  ASSERT_TRUE(WriteSafetensors(d.File("b.safetensors"), {test::F32Tensor("z", {1}, {4}),
                                                         test::F32Tensor("y", {1}, {3})}).ok());
  test::WriteText(d.File("model.safetensors.index.json"),
                  R"({"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"}})");
  EXPECT_NE(OpenError(d.path()).find("tensor 'y' is in shard 'b.safetensors' but the index places it in 'a.safetensors'"),
            std::string::npos);
}

TEST(Checkpoint, TotalSizeMismatch) {
  TempDir d;
  WriteShards(d);
  test::WriteText(d.File("model.safetensors.index.json"),
                  R"({"metadata":{"total_size":999},"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"}})");
  EXPECT_NE(OpenError(d.path()).find("total_size is 999 but the shards' tensors hold 16 bytes"), std::string::npos);
}

TEST(Checkpoint, ShardOutsideDirectoryIsRefused) {
  TempDir d;
  WriteShards(d);
  test::WriteText(d.File("model.safetensors.index.json"), R"({"weight_map":{"x":"../a.safetensors"}})");
  EXPECT_NE(OpenError(d.path()).find("is not a file name inside the directory"), std::string::npos);
}

TEST(Checkpoint, CorruptShardErrorNamesTheShard) {
  TempDir d;
  WriteShards(d);
  test::WriteText(d.File("b.safetensors"), std::string("\x04\0\0\0\0\0\0\0{}", 10));
  test::WriteText(d.File("model.safetensors.index.json"),
                  R"({"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"}})");
  const std::string e = OpenError(d.path());
  EXPECT_NE(e.find("b.safetensors: header length 4 runs past the end of the file"), std::string::npos) << e;
}

TEST(Checkpoint, EmptyDirectory) {
  TempDir d;
  EXPECT_NE(OpenError(d.path()).find("neither model.safetensors nor model.safetensors.index.json"), std::string::npos);
}

TEST(Checkpoint, IndexWithoutWeightMap) {
  TempDir d;
  test::WriteText(d.File("model.safetensors.index.json"), R"({"metadata":{}})");
  EXPECT_NE(OpenError(d.path()).find("missing or empty \"weight_map\""), std::string::npos);
}

TEST(Checkpoint, ReadAsFloatRefusesIntegerTensors) {
  TempDir d;
  TensorToWrite t{"ids", DType::kI32, {2}, std::vector<uint8_t>(8)};
  ASSERT_TRUE(WriteSafetensors(d.File("model.safetensors"), {t}).ok());
  auto c = Checkpoint::Open(d.path());
  ASSERT_TRUE(c.ok());
  auto v = ReadAsFloat(c->Find("ids"));
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("tensor 'ids' has dtype I32"), std::string::npos);
}

}  // namespace
}  // namespace graft
