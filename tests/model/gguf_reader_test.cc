// The GGUF reader against byte images built here from the format description, not by
// GgufWriter, so a shared misreading of the format cannot pass both.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ptxserve {
namespace {

using ::testing::HasSubstr;

// Appends little-endian fields.
struct Bytes {
  std::string b;
  template <typename T>
  Bytes& Put(T v) {
    char c[sizeof(T)];
    std::memcpy(c, &v, sizeof(T));
    b.append(c, sizeof(T));
    return *this;
  }
  Bytes& Str(const std::string& s) {
    Put<uint64_t>(s.size());
    b += s;
    return *this;
  }
  Bytes& Header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    b += "GGUF";
    return Put<uint32_t>(version).Put<uint64_t>(tensors).Put<uint64_t>(kvs);
  }
  // A tensor info: name, dims, type, offset.
  Bytes& Info(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t off) {
    Str(name).Put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) Put<uint64_t>(d);
    return Put<uint32_t>(type).Put<uint64_t>(off);
  }
  Bytes& PadTo(size_t align) {
    b.resize((b.size() + align - 1) / align * align, '\0');
    return *this;
  }
};

absl::StatusOr<std::unique_ptr<GgufFile>> Parse(const Bytes& b) {
  return GgufFile::FromBytes(b.b, "t.gguf");
}

// Two f32 tensors: "a" [2, 3] (ne {3, 2}) at 0 and "b" [4] at 32.
Bytes TwoTensors() {
  Bytes b;
  b.Header(2, 1).Str("general.architecture").Put<uint32_t>(8).Str("llama");
  b.Info("a", {3, 2}, 0, 0).Info("b", {4}, 0, 32).PadTo(32);
  for (int i = 0; i < 6; ++i) b.Put<float>(static_cast<float>(i));
  b.PadTo(32);
  for (int i = 0; i < 4; ++i) b.Put<float>(10.0f + static_cast<float>(i));
  return b;
}

TEST(GgufReaderTest, ReadsAMinimalFile) {
  Bytes b;
  b.Header(0, 0);
  auto f = Parse(b);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_TRUE((*f)->metadata().empty());
  EXPECT_TRUE((*f)->tensors().empty());
}

TEST(GgufReaderTest, ReadsVersion2) {
  Bytes b;
  b.Header(0, 0, 2);
  ASSERT_TRUE(Parse(b).ok());
}

TEST(GgufReaderTest, ReadsTensorsWithHfShapes) {
  auto f = Parse(TwoTensors());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->data_offset() % 32, 0u);
  auto a = (*f)->GetTensor("a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->nbytes, 24u);
  EXPECT_EQ(static_cast<const float*>(a->data)[5], 5.0f);
  auto t = (*f)->GetTensor("b");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(static_cast<const float*>(t->data)[3], 13.0f);
  EXPECT_EQ((*f)->GetTensor("c").status().code(), absl::StatusCode::kNotFound);
}

TEST(GgufReaderTest, ReadsEveryMetadataType) {
  Bytes b;
  b.Header(0, 14);
  b.Str("u8").Put<uint32_t>(0).Put<uint8_t>(200);
  b.Str("i8").Put<uint32_t>(1).Put<int8_t>(-100);
  b.Str("u16").Put<uint32_t>(2).Put<uint16_t>(60000);
  b.Str("i16").Put<uint32_t>(3).Put<int16_t>(-30000);
  b.Str("u32").Put<uint32_t>(4).Put<uint32_t>(4000000000u);
  b.Str("i32").Put<uint32_t>(5).Put<int32_t>(-2000000000);
  b.Str("f32").Put<uint32_t>(6).Put<float>(0.5f);
  b.Str("bool").Put<uint32_t>(7).Put<uint8_t>(1);
  b.Str("string").Put<uint32_t>(8).Str("hello");
  b.Str("array").Put<uint32_t>(9).Put<uint32_t>(8).Put<uint64_t>(2).Str("x").Str("yz");
  b.Str("u64").Put<uint32_t>(10).Put<uint64_t>(uint64_t{1} << 40);
  b.Str("i64").Put<uint32_t>(11).Put<int64_t>(-(int64_t{1} << 40));
  b.Str("f64").Put<uint32_t>(12).Put<double>(0.25);
  b.Str("nested").Put<uint32_t>(9).Put<uint32_t>(9).Put<uint64_t>(1);
  b.Put<uint32_t>(5).Put<uint64_t>(2).Put<int32_t>(-1).Put<int32_t>(7);
  auto f = Parse(b);
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(*g.GetInt("u8"), 200);
  EXPECT_EQ(*g.GetInt("i8"), -100);
  EXPECT_EQ(*g.GetInt("u16"), 60000);
  EXPECT_EQ(*g.GetInt("i16"), -30000);
  EXPECT_EQ(*g.GetInt("u32"), 4000000000);
  EXPECT_EQ(*g.GetInt("i32"), -2000000000);
  EXPECT_EQ(*g.GetFloat("f32"), 0.5);
  EXPECT_EQ(*g.GetBool("bool"), true);
  EXPECT_EQ(*g.GetString("string"), "hello");
  EXPECT_EQ(*g.GetStringArray("array"), (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(*g.GetInt("u64"), int64_t{1} << 40);
  EXPECT_EQ(*g.GetInt("i64"), -(int64_t{1} << 40));
  EXPECT_EQ(*g.GetFloat("f64"), 0.25);
  const GgufValue* nested = g.Find("nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->array.size(), 1u);
  EXPECT_EQ(nested->array[0].array[1].i, 7);
  EXPECT_THAT(g.GetString("u8").status().message(), HasSubstr("'u8' is a u8, expected a string"));
  EXPECT_EQ(g.GetInt("missing").status().code(), absl::StatusCode::kNotFound);
}

// Each malformed image fails with a message holding `want` (which names the byte offset).
struct BadCase {
  std::string name;
  Bytes bytes;
  std::string want;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class GgufReaderErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(GgufReaderErrorTest, RefusesWithTheOffset) {
  auto f = Parse(GetParam().bytes);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(f.status().message(), HasSubstr("t.gguf: "));
  EXPECT_THAT(f.status().message(), HasSubstr(GetParam().want));
}

Bytes Truncated(const Bytes& b, size_t n) { return Bytes{b.b.substr(0, n)}; }

std::vector<BadCase> BadCases() {
  std::vector<BadCase> c;
  const Bytes good = TwoTensors();
  c.push_back({"empty", Bytes{}, "byte offset 0: truncated magic"});
  c.push_back({"bad_magic", Bytes{"GGUX" + good.b.substr(4)}, "byte offset 0: bad magic"});
  Bytes v1;
  v1.Header(0, 0, 1);
  c.push_back({"version_1", v1, "byte offset 4: GGUF version 1 is not supported"});
  Bytes v4;
  v4.Header(0, 0, 4);
  c.push_back({"version_4", v4, "byte offset 4: GGUF version 4"});
  c.push_back({"truncated_version", Truncated(good, 6), "byte offset 4: truncated version"});
  c.push_back(
      {"truncated_counts", Truncated(good, 20), "byte offset 16: truncated metadata count"});
  // Counts that fit what is left, then a field cut short.
  Bytes key;
  key.Header(0, 1).Put<uint64_t>(20).b += "abcd";
  c.push_back(
      {"truncated_key", key, "byte offset 24: truncated metadata key: length 20 but 4 bytes left"});
  Bytes value;
  value.Header(0, 1).Str("k").Put<uint32_t>(8).Put<uint64_t>(100).b += "xy";
  c.push_back({"truncated_value", value, "byte offset 37: truncated string value: length 100"});
  Bytes info;
  info.Header(1, 0).Str("abcdefghijkl").Put<uint32_t>(1);
  c.push_back({"truncated_ne", info, "byte offset 48: truncated tensor 'abcdefghijkl' ne"});
  Bytes many_kv;
  many_kv.Header(0, uint64_t{1} << 40);
  c.push_back({"absurd_kv_count", many_kv, "byte offset 16: metadata count 1099511627776"});
  Bytes many_t;
  many_t.Header(uint64_t{1} << 60, 0);
  c.push_back({"absurd_tensor_count", many_t, "byte offset 8: tensor count"});
  Bytes big_array;
  big_array.Header(0, 1).Str("a").Put<uint32_t>(9).Put<uint32_t>(6).Put<uint64_t>(1000);
  c.push_back({"array_past_end", big_array, "byte offset 37: truncated array: 1000 f32"});
  Bytes bad_type;
  bad_type.Header(0, 1).Str("k").Put<uint32_t>(13).Put<uint32_t>(0);
  c.push_back({"unknown_value_type", bad_type, "byte offset 37: unknown value type 13"});
  Bytes bad_bool;
  bad_bool.Header(0, 1).Str("k").Put<uint32_t>(7).Put<uint8_t>(2);
  c.push_back({"bool_2", bad_bool, "byte offset 37: bool value 2"});
  Bytes dup;
  dup.Header(0, 2).Str("k").Put<uint32_t>(0).Put<uint8_t>(1).Str("k").Put<uint32_t>(0).Put<uint8_t>(
      2);
  c.push_back({"duplicate_key", dup, "byte offset 38: duplicate metadata key 'k'"});
  Bytes align;
  align.Header(0, 1).Str("general.alignment").Put<uint32_t>(4).Put<uint32_t>(24);
  c.push_back(
      {"alignment_not_power_of_two", align, "general.alignment must be a u32 power of two"});

  auto one_tensor = [](std::vector<uint64_t> ne, uint32_t type, uint64_t off, size_t data) {
    Bytes b;
    b.Header(1, 0).Info("w", std::move(ne), type, off).PadTo(32);
    b.b.append(data, '\0');
    return b;
  };
  // The info starts at 24: name length at 24, n_dims at 33, ne at 37.
  c.push_back({"too_many_dims", one_tensor({1, 1, 1, 1, 1}, 0, 0, 4),
               "byte offset 33: tensor 'w' has 5 dimensions (at most 4)"});
  c.push_back({"unknown_ggml_type", one_tensor({4}, 4, 0, 16),
               "byte offset 45: tensor 'w' has unknown GGML type id 4"});
  c.push_back({"ne_overflow", one_tensor({uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0, 4),
               "byte offset 33: tensor 'w': element count of ne [1099511627776, 1099511627776] "
               "overflows"});
  c.push_back({"partial_block", one_tensor({48, 2}, 8, 0, 128),
               "byte offset 33: tensor 'w': row of 48 elements is not a multiple of q8_0's block "
               "of 32"});
  // Data starts at 64 (the 57-byte header padded to 32).
  c.push_back({"misaligned_data", one_tensor({4}, 0, 8, 64),
               "byte offset 72: tensor 'w' (info at byte offset 24): data offset 8 is not a "
               "multiple of the alignment 32"});
  c.push_back({"data_past_end", one_tensor({4}, 0, 0, 12),
               "byte offset 64: tensor 'w' (info at byte offset 24): data [0, +16) runs past the "
               "end of the file"});
  c.push_back({"data_far_past_end", one_tensor({4}, 0, uint64_t{1} << 62, 16),
               "runs past the end of the file"});
  Bytes overlap;
  overlap.Header(2, 0).Info("a", {16}, 0, 0).Info("b", {4}, 0, 32).PadTo(32);
  overlap.b.append(64, '\0');
  c.push_back({"overlapping_data", overlap,
               "tensor 'b' (info at byte offset 57): data overlaps "
               "tensor 'a'"});
  Bytes dup_t;
  dup_t.Header(2, 0).Info("a", {4}, 0, 0).Info("a", {4}, 0, 32).PadTo(32);
  dup_t.b.append(64, '\0');
  c.push_back({"duplicate_tensor", dup_t, "byte offset 57: duplicate tensor name 'a'"});
  return c;
}

INSTANTIATE_TEST_SUITE_P(Malformed, GgufReaderErrorTest, ::testing::ValuesIn(BadCases()),
                         [](const auto& info) { return info.param.name; });

TEST(GgufReaderTest, EveryTruncationOfAValidFileFails) {
  const Bytes good = TwoTensors();
  ASSERT_TRUE(Parse(good).ok());
  for (size_t n = 0; n < good.b.size(); ++n) {
    auto f = Parse(Truncated(good, n));
    ASSERT_FALSE(f.ok()) << "accepted " << n << " of " << good.b.size() << " bytes";
    EXPECT_THAT(f.status().message(), HasSubstr("byte offset")) << n;
  }
}

TEST(GgufReaderTest, UnsupportedTensorTypeIsUnimplementedByName) {
  Bytes b;
  b.Header(1, 0).Info("blk.0.ffn_up.weight", {256}, 13, 0).PadTo(32);
  b.b.append(176, '\0');
  auto f = Parse(b);
  ASSERT_TRUE(f.ok()) << f.status();
  auto t = (*f)->GetTensor("blk.0.ffn_up.weight");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(t.status().message(), HasSubstr("tensor 'blk.0.ffn_up.weight' has GGML type q5_K"));
}

TEST(GgufReaderTest, QuantizedTensorsKeepTheirLogicalShape) {
  Bytes b;
  b.Header(1, 0).Info("q", {64, 3}, 2, 0).PadTo(32);  // q4_0: 2 blocks of 18 bytes per row
  b.b.append(3 * 2 * 18, '\0');
  auto f = Parse(b);
  ASSERT_TRUE(f.ok()) << f.status();
  auto t = (*f)->GetTensor("q");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->quant, QuantType::kQ4_0);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(t->nbytes, 108u);
}

TEST(GgufReaderTest, OpenNamesAMissingFile) {
  auto f = GgufFile::Open("/nonexistent/m.gguf");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(f.status().message(), HasSubstr("/nonexistent/m.gguf"));
}

}  // namespace
}  // namespace ptxserve
