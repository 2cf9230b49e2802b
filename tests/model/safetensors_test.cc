#include "engine/model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tests/model/test_files.h"

namespace ptxserve {
namespace {

using test_files::BuildSafetensors;
using test_files::F32Bytes;
using test_files::RawSafetensors;
using test_files::RawTensor;
using test_files::TempDir;
using ::testing::HasSubstr;

TEST(SafetensorsTest, ParsesEntriesMetadataAndViews) {
  TempDir dir;
  const std::vector<RawTensor> tensors = {
      {"b", "F32", {2, 2}, F32Bytes({1, 2, 3, 4})},
      {"empty", "F16", {0, 5}, ""},
      {"ids", "I64", {1}, std::string(8, '\x7')},
      {"a", "BF16", {3}, std::string("\x80\x3f\x00\x40\x40\x40", 6)},
  };
  const std::string path =
      dir.Write("w.safetensors", BuildSafetensors(tensors, {{"format", "pt"}, {"alias", "b"}}));
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->path(), path);
  EXPECT_EQ((*f)->data_offset() % 8, 0u);
  ASSERT_EQ((*f)->entries().size(), 4u);
  // Sorted by offset: the empty tensor sits at 16 with "ids".
  EXPECT_EQ((*f)->entries()[0].name, "b");
  EXPECT_EQ((*f)->entries()[1].name, "empty");
  EXPECT_EQ((*f)->entries()[2].name, "ids");
  EXPECT_EQ((*f)->entries()[3].name, "a");
  EXPECT_EQ((*f)->entries()[3].begin, 24u);
  EXPECT_EQ((*f)->entries()[3].end, 30u);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  EXPECT_EQ((*f)->metadata().at("alias"), "b");

  auto b = (*f)->GetTensor("b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->dtype, DType::kF32);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(b->nbytes, 16u);
  EXPECT_EQ(static_cast<const float*>(b->data)[3], 4.0f);

  auto a = (*f)->GetTensor("a");
  ASSERT_TRUE(a.ok()) << a.status();
  float v[3];
  ConvertToFloat(a->dtype, a->data, 3, v);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 2.0f);
  EXPECT_EQ(v[2], 3.0f);

  auto empty = (*f)->GetTensor("empty");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->present());
  EXPECT_EQ(empty->numel(), 0);
  EXPECT_EQ(empty->nbytes, 0u);

  auto ids = (*f)->GetTensor("ids");
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(ids.status().message()),
              HasSubstr("unsupported dtype I64 for tensor 'ids' in " + path));

  auto missing = (*f)->GetTensor("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("'nope' not found in " + path));
}

// One rejected file: its bytes and a substring the error must hold (besides the path).
struct BadFile {
  const char* name;
  std::string bytes;
  std::string problem;
};

std::vector<BadFile> BadFiles() {
  auto one = [](const std::string& entry) { return RawSafetensors(entry, std::string(16, '\0')); };
  return {
      {"metadata_not_object", one(R"({"__metadata__": [1]})"), "__metadata__ is a array"},
      {"metadata_value_not_string", one(R"({"__metadata__": {"format": 1}})"),
       "__metadata__ entry 'format' is 1, not a string"},
      {"shape_missing", one(R"({"t": {"dtype": "F32", "data_offsets": [0, 16]}})"),
       "tensor 't': 'shape' missing"},
      {"dtype_not_string", one(R"({"t": {"dtype": 4, "shape": [4], "data_offsets": [0, 16]}})"),
       "tensor 't': 'dtype' missing or not a string"},
      {"offsets_three", one(R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8, 16]}})"),
       "tensor 't': 'data_offsets' must be"},
      {"offsets_huge",
       one(R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 99999999999999999999]}})"),
       "tensor 't': 'data_offsets' must be"},
      {"shape_float", one(R"({"t": {"dtype": "F32", "shape": [4.0], "data_offsets": [0, 16]}})"),
       "tensor 't': shape entry 4.0 is not a non-negative integer"},
      {"shape_nested", one(R"({"t": {"dtype": "F32", "shape": [[4]], "data_offsets": [0, 16]}})"),
       "tensor 't': shape entry array"},
      {"numel_times_size_overflows",
       one(R"({"t": {"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 16]}})"),
       "tensor 't': data_offsets [0, 16] hold 16 bytes"},
      {"unknown_dtype_still_range_checked",
       one(R"({"t": {"dtype": "Q4_K", "shape": [4], "data_offsets": [0, 17]}})"),
       "tensor 't': data_offsets [0, 17] run past the end of the data section (16 bytes)"},
      {"overlap_second_pair",
       one(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
           R"( "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]},)"
           R"( "c": {"dtype": "U8", "shape": [2], "data_offsets": [10, 12]}})"),
       "tensor 'c' (data_offsets [10, 12]) overlaps tensor 'b' (data_offsets [4, 12])"},
      {"invalid_utf8", one("{\"t\xff\": 1}"), "not valid JSON at header byte"},
      {"trailing_garbage", one("{} x"), "not valid JSON at header byte 4 (file offset 11)"},
  };
}

void PrintTo(const BadFile& c, std::ostream* os) { *os << c.name; }

class BadSafetensorsTest : public ::testing::TestWithParam<BadFile> {};

TEST_P(BadSafetensorsTest, IsRejectedNamingFileAndProblem) {
  TempDir dir;
  const std::string path = dir.Write("bad.safetensors", GetParam().bytes);
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(GetParam().problem));
}

INSTANTIATE_TEST_SUITE_P(Cases, BadSafetensorsTest, ::testing::ValuesIn(BadFiles()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(SafetensorsTest, MissingFileAndDirectory) {
  TempDir dir;
  auto f = SafetensorsFile::Open(dir.path() + "/absent.safetensors");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(dir.path() + "/absent.safetensors"));
  f = SafetensorsFile::Open(dir.path());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("not a regular file"));
}

TEST(SafetensorsTest, AbsurdHeaderLengthInALargeFile) {
  TempDir dir;
  std::string head(8, '\0');
  const uint64_t n = 150'000'000;  // fits the (sparse) 200 MB file, but no header is that big
  for (int i = 0; i < 8; ++i)
    head[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  const std::string path = dir.Write("big.safetensors", head);
  std::filesystem::resize_file(path, 200'000'000);
  auto f = SafetensorsFile::Open(path);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("header length 150000000 is absurd"));
}

// Every prefix and many random corruptions of a valid file either open or fail with a
// status; under ASan/UBSan this checks that no input reads out of bounds.
TEST(SafetensorsTest, TruncationsAndCorruptionsNeverCrash) {
  TempDir dir;
  const std::string good = BuildSafetensors(
      {{"x", "F32", {3}, F32Bytes({1, 2, 3})}, {"y", "BF16", {2, 1}, std::string(4, '\1')}},
      {{"format", "pt"}});
  for (size_t len = 0; len <= good.size(); ++len) {
    const std::string path = dir.Write("t.safetensors", good.substr(0, len));
    auto f = SafetensorsFile::Open(path);
    EXPECT_EQ(f.ok(), len == good.size()) << "prefix of " << len << " bytes";
    if (!f.ok()) {
      EXPECT_THAT(std::string(f.status().message()), HasSubstr(path));
    }
  }
  std::mt19937 rng(1234);
  int opened = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng() & 0xff);
    }
    const std::string path = dir.Write("c.safetensors", bytes);
    auto f = SafetensorsFile::Open(path);
    if (!f.ok()) continue;
    ++opened;
    for (const SafetensorsEntry& e : (*f)->entries()) {
      auto t = (*f)->GetTensor(e.name);
      if (!t.ok()) continue;
      EXPECT_LE((*f)->data_offset() + e.end, (*f)->file_size()) << e.name;
      // Touch every byte of the view: one outside the mapping would fault.
      volatile unsigned sum = 0;
      for (size_t i = 0; i < t->nbytes; ++i) sum = sum + static_cast<const uint8_t*>(t->data)[i];
    }
  }
  EXPECT_GT(opened, 0);  // flips in the data section leave the file valid
}

}  // namespace
}  // namespace ptxserve
