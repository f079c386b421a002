#include "io/checkpoint.h"
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace graft {
namespace {

using test::TempDir;
using test::WriteRaw;

std::string OpenError(const std::string& path) {
  auto f = SafetensorsFile::Open(path);
  EXPECT_FALSE(f.ok());
  return f.ok() ? "" : f.status().ToString();
}

TEST(Safetensors, ReadsWhatTheWriterWrites) {
  TempDir d;
  const std::string p = d.File("a.safetensors");
  ASSERT_TRUE(WriteSafetensors(p, {test::F32Tensor("w", {2, 3}, {1, 2, 3, 4, 5, 6}),
                                   test::Bf16Tensor("b", {3}, {0.5f, -1, 2}),
                                   test::F32Tensor("scalar", {}, {7}),
                                   test::F32Tensor("empty", {0, 4}, {})})
                  .ok());
  auto f = SafetensorsFile::Open(p);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->tensors().size(), 4u);
  const TensorInfo* w = f->Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kF32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  auto v = ReadAsFloat(TensorRef{&*f, w});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v.value(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(f->Find("scalar")->num_elements(), 1u);
  EXPECT_EQ(f->Find("empty")->num_bytes(), 0u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->Find("nope"), nullptr);
}

TEST(Safetensors, TruncatedFileNamesTheTensor) {
  TempDir d;
  const std::string p = d.File("t.safetensors");
  WriteRaw(p, R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::vector<uint8_t>(10));
  const std::string e = OpenError(p);
  EXPECT_NE(e.find("t.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'a' ends at byte 16 but the data buffer holds 10 bytes"), std::string::npos) << e;
}

TEST(Safetensors, FileShorterThanLengthPrefix) {
  TempDir d;
  test::WriteText(d.File("s.safetensors"), "abc");
  EXPECT_NE(OpenError(d.File("s.safetensors")).find("too short for the 8-byte header length"), std::string::npos);
}

TEST(Safetensors, HeaderLengthPastEndOfFile) {
  TempDir d;
  const std::string p = d.File("h.safetensors");
  std::string bytes(8, '\0');
  bytes[0] = 100;  // claims 100 header bytes
  test::WriteText(p, bytes + "{}");
  EXPECT_NE(OpenError(p).find("header length 100 runs past the end of the file"), std::string::npos);
}

TEST(Safetensors, OversizedHeaderIsRefusedBeforeReading) {
  TempDir d;
  const std::string p = d.File("big.safetensors");
  std::string bytes(8, '\0');
  const uint64_t n = kMaxHeaderBytes + 1;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
  test::WriteText(p, bytes + "{}");
  EXPECT_NE(OpenError(p).find("exceeds the limit of 100000000 bytes"), std::string::npos);
}

TEST(Safetensors, OverlappingTensors) {
  TempDir d;
  const std::string p = d.File("o.safetensors");
  WriteRaw(p,
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           std::vector<uint8_t>(12));
  EXPECT_NE(OpenError(p).find("tensor 'b' (bytes 4..12) overlaps tensor 'a'"), std::string::npos);
}

TEST(Safetensors, HoleBetweenTensors) {
  TempDir d;
  const std::string p = d.File("g.safetensors");
  WriteRaw(p,
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
           std::vector<uint8_t>(12));
  EXPECT_NE(OpenError(p).find("4 unused bytes before tensor 'b'"), std::string::npos);
}

TEST(Safetensors, TrailingBytesAfterLastTensor) {
  TempDir d;
  const std::string p = d.File("x.safetensors");
  WriteRaw(p, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::vector<uint8_t>(9));
  EXPECT_NE(OpenError(p).find("data buffer holds 9 bytes but the tensors cover 4"), std::string::npos);
}

TEST(Safetensors, UnknownDtypeNamesTensorAndDtype) {
  TempDir d;
  const std::string p = d.File("u.safetensors");
  WriteRaw(p, R"({"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}})", std::vector<uint8_t>(2));
  EXPECT_NE(OpenError(p).find("tensor 'w': unknown dtype 'Q4_K'"), std::string::npos);
}

TEST(Safetensors, ShapeDisagreesWithOffsets) {
  TempDir d;
  const std::string p = d.File("m.safetensors");
  WriteRaw(p, R"({"w":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,8]}})", std::vector<uint8_t>(8));
  EXPECT_NE(OpenError(p).find("tensor 'w': shape [3, 2] of BF16 needs 12 bytes but data_offsets span 8"),
            std::string::npos);
}

TEST(Safetensors, SubByteDtypesMustFillWholeBytes) {
  TempDir d;
  const std::string ok = d.File("f4.safetensors"), bad = d.File("f4bad.safetensors");
  WriteRaw(ok, R"({"w":{"dtype":"F4","shape":[2,4],"data_offsets":[0,4]}})", std::vector<uint8_t>(4));
  EXPECT_TRUE(SafetensorsFile::Open(ok).ok());
  WriteRaw(bad, R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", std::vector<uint8_t>(2));
  EXPECT_NE(OpenError(bad).find("do not fill whole bytes"), std::string::npos);
}

TEST(Safetensors, MalformedHeaders) {
  TempDir d;
  struct Case {
    std::string header, expect;
  };
  const std::vector<Case> cases = {
      {"{not json", "header is not valid JSON"},
      {"[1,2]", "header is not a JSON object"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       "duplicate key 'a'"},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "shape dimension must be a non-negative integer"},
      {R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "shape dimension must be a non-negative integer"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "data_offsets end 0 is before begin 4"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "data_offsets must be an array [begin, end]"},
      {R"({"a":{"shape":[1],"data_offsets":[0,4]}})", "missing or non-string dtype"},
      {R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", "missing or non-array shape"},
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", "overflows 64 bits"},
      {R"({"__metadata__":{"format":1}})", "__metadata__ value 'format' is not a string"},
      {R"({"a":7})", "tensor 'a': entry is not an object"},
      {"{\"\xff\":1}", "header is not valid JSON"},
  };
  for (const auto& c : cases) {
    const std::string p = d.File("bad.safetensors");
    WriteRaw(p, c.header, std::vector<uint8_t>(8));
    const std::string e = OpenError(p);
    EXPECT_NE(e.find(c.expect), std::string::npos) << "header " << c.header << " gave: " << e;
  }
}

}  // namespace
}  // namespace graft
