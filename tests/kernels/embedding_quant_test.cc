// The embedding gather over a block-quantized table (kernels/embedding.h, q8_0 and q4_0) on
// the emulator against the CPU's dequantization (engine/model/quant.h), bit for bit: random
// blocks, edge blocks (zero, subnormal, largest and negative scales; extreme codes), ids
// out of range, rows of 1 to 257 blocks (one thread step and several).
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/quant.h"
#include "gtest/gtest.h"
#include "kernels/embedding.h"
#include "tests/kernels/emu_harness.h"

namespace ptxserve::kernels::testing {
namespace {

QuantType ToQuantType(BlockFormat f) {
  return f == BlockFormat::kQ8_0 ? QuantType::kQ8_0 : QuantType::kQ4_0;
}

// f16 scales a block may carry: 0, -0, the smallest subnormal, a subnormal, 1, the largest
// finite and its negative, and one as small as a normal gets.
constexpr uint16_t kEdgeScales[] = {0x0000, 0x8000, 0x0001, 0x03FF, 0x3C00, 0x7BFF, 0xFBFF, 0x0400};
// Code bytes at the ends of each format's range: int8 -128, 127, -1, 0; nibbles 0 and 15.
constexpr uint8_t kEdgeCodes[] = {0x80, 0x7F, 0xFF, 0x00, 0x0F, 0xF0};

// `rows` rows of `dim` elements in `f`'s blocks: rows up to `edge_rows` take their scales
// and code bytes from the edge lists (each block one scale, all its codes one byte), the
// rest random finite scales and random bytes (every code value of both formats).
std::vector<uint8_t> Blocks(std::mt19937& rng, BlockFormat f, int rows, int dim, int edge_rows) {
  const int bb = BlockBytes(f), nb = dim / 32;
  std::vector<uint8_t> out(static_cast<size_t>(rows) * nb * bb);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> exponent_mantissa(0, 0x7BFF);  // finite f16 magnitudes
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < nb; ++b) {
      uint8_t* blk = out.data() + (static_cast<size_t>(r) * nb + b) * bb;
      const int e = r * nb + b;
      uint16_t d;
      if (r < edge_rows) {
        d = kEdgeScales[e % std::size(kEdgeScales)];
        std::memset(blk + 2, kEdgeCodes[(e / 3) % std::size(kEdgeCodes)], bb - 2);
      } else {
        d = static_cast<uint16_t>(exponent_mantissa(rng) | (byte(rng) & 1) << 15);
        for (int i = 2; i < bb; ++i) blk[i] = static_cast<uint8_t>(byte(rng));
      }
      std::memcpy(blk, &d, 2);
    }
  }
  return out;
}

TEST(EmbeddingQuant, GathersRowsAsCpuDequantizes) {
  std::mt19937 rng(16);
  for (BlockFormat f : {BlockFormat::kQ8_0, BlockFormat::kQ4_0}) {
    // 1, 3, 65 and 257 blocks a row: 32 threads with one block each, 96 threads, and 256
    // threads that loop once more over the last block.
    for (int dim : {32, 96, 2080, 8224}) {
      SCOPED_TRACE(absl::StrCat(BlockFormatName(f), " dim ", dim));
      const int vocab = 13;
      const std::vector<uint8_t> table = Blocks(rng, f, vocab, dim, /*edge_rows=*/4);
      const std::vector<int32_t> ids = {
          0, 12, 5, 5, -1, 13, 1 << 30, 2, 3, std::numeric_limits<int32_t>::min(), 1};
      const int n = static_cast<int>(ids.size());
      const int64_t row_bytes = QuantRowBytes(ToQuantType(f), dim);
      std::vector<float> want(static_cast<size_t>(n) * dim, 0.0f);
      for (int t = 0; t < n; ++t) {
        if (ids[t] >= 0 && ids[t] < vocab) {
          DequantizeRow(ToQuantType(f), table.data() + ids[t] * row_bytes, dim, &want[t * dim]);
        }
      }
      EmbeddingConfig cfg;
      cfg.dim = dim;
      cfg.blocks = true;
      cfg.block_format = f;
      absl::StatusOr<std::string> ptx = GenerateEmbedding(cfg);
      ASSERT_TRUE(ptx.ok()) << ptx.status();
      EmuHarness h;
      const uint64_t dt = h.Upload(table), di = h.Upload(ids), dout = h.Alloc(n * dim * 4);
      const absl::Status st = h.Run(*ptx, kEmbeddingEntry, EmbeddingLaunch(cfg, n),
                                    {Ptr(dt), Ptr(di), Ptr(dout), U32(n), U32(vocab)});
      ASSERT_TRUE(st.ok()) << st;
      const std::vector<float> got = h.Download<float>(dout, n * dim);
      // Bitwise: -0 from a negative scale times a zero code included.
      int mismatches = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        uint32_t g, w;
        std::memcpy(&g, &got[i], 4);
        std::memcpy(&w, &want[i], 4);
        if (g != w && ++mismatches <= 5) {
          ADD_FAILURE() << "token " << i / dim << " (id " << ids[i / dim] << ") element " << i % dim
                        << ": got " << got[i] << " (0x" << std::hex << g << "), want " << want[i]
                        << " (0x" << w << ")" << std::dec;
        }
      }
      EXPECT_EQ(mismatches, 0);
    }
  }
}

TEST(EmbeddingQuant, RefusesRowsOfPartialBlocks) {
  EmbeddingConfig cfg;
  cfg.dim = 100;
  cfg.blocks = true;
  cfg.block_format = BlockFormat::kQ4_0;
  const absl::StatusOr<std::string> ptx = GenerateEmbedding(cfg);
  ASSERT_FALSE(ptx.ok());
  EXPECT_EQ(ptx.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ptx.status().message().find("dim = 100"), std::string::npos) << ptx.status();
  EXPECT_NE(ptx.status().message().find("q4_0"), std::string::npos) << ptx.status();
  // The same dim in elements is a table the gather reads.
  cfg.blocks = false;
  EXPECT_TRUE(GenerateEmbedding(cfg).ok());
}

// The block format is part of the kernel's key (one cached module per table format), and
// the element dtype is not while the table is blocks.
TEST(EmbeddingQuant, KeyNamesTheTableFormat) {
  EmbeddingConfig e;
  e.dim = 2048;
  EmbeddingConfig q8 = e, q4 = e;
  q8.blocks = q4.blocks = true;
  q4.block_format = BlockFormat::kQ4_0;
  EXPECT_NE(q8.Key().find(":q8_0:"), std::string::npos) << q8.Key();
  EXPECT_NE(q4.Key().find(":q4_0:"), std::string::npos) << q4.Key();
  EXPECT_EQ(q8.Key().find(":f32"), std::string::npos) << q8.Key();
  EXPECT_NE(e.Key().find(":f32:"), std::string::npos) << e.Key();
}

}  // namespace
}  // namespace ptxserve::kernels::testing
