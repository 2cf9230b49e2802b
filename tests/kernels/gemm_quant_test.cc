// The quantized GEMV (kernels/gemm_quant.h) on the emulator against the CPU backend's
// quantized GEMM (engine/cpu), for q8_0, q4_0, fp8_e4m3 and int4_g128 at odd shapes and
// batches of 1..8 rows and more, on random blocks and on blocks of edge codes, and through
// the registry's key and launch rules.
#include "kernels/gemm_quant.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/gemm_tiles.h"
#include "engine/cpu/ops.h"
#include "engine/model/quant.h"
#include "gtest/gtest.h"
#include "tests/kernels/emu_harness.h"

namespace ptxserve::kernels::testing {
namespace {

QuantType ToQuantType(BlockFormat f) {
  switch (f) {
    case BlockFormat::kQ8_0:
      return QuantType::kQ8_0;
    case BlockFormat::kQ4_0:
      return QuantType::kQ4_0;
    case BlockFormat::kFp8E4M3:
      return QuantType::kFp8E4M3;
    case BlockFormat::kInt4G128:
      break;
  }
  return QuantType::kInt4G128;
}

struct QuantGemmCase {
  int m, n, k;
  BlockFormat format;
  int m_tile;  // 0: QuantGemmConfigFor's
  int warps;
  bool bias, accumulate;
  int split = 0;      // 0: QuantGemmConfigFor's
  int cols = 0;       // 0: QuantGemmConfigFor's
  bool norm = false;  // the input rows' RMSNorm fused
};

// n rows of k random weights in `f`'s blocks, padded with zero bytes to a multiple of 16
// (the kernel's contract: it reads whole 16-byte units).
std::vector<uint8_t> RandomBlocks(std::mt19937& rng, BlockFormat f, int n, int k) {
  const int64_t row_bytes = QuantRowBytes(ToQuantType(f), k);
  std::vector<uint8_t> out((n * row_bytes + 15) / 16 * 16, 0);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> row = RandomFloats(rng, k);
    EXPECT_TRUE(QuantizeRow(ToQuantType(f), row.data(), k, out.data() + r * row_bytes).ok());
  }
  return out;
}

// The GEMV on `w` against the CPU backend's widened-rows kernel: the f32 GEMM over the
// dequantized rows, which the GEMV computes too, in another order of sums. With c.norm,
// against the CPU's rmsnorm then that GEMM.
void ExpectMatchesCpu(std::mt19937& rng, const QuantGemmCase& c, const std::vector<uint8_t>& w) {
  SCOPED_TRACE(absl::StrCat("m ", c.m, " n ", c.n, " k ", c.k, " ", BlockFormatName(c.format),
                            " warps ", c.warps, c.norm ? " norm" : ""));
  std::vector<float> x = RandomFloats(rng, c.m * c.k);
  const std::vector<float> bias = RandomFloats(rng, c.n);
  const std::vector<float> y0 = RandomFloats(rng, c.m * c.n);
  // Rows of unequal scale, so that a row's RMS computed over a slice or another row's
  // elements would show; norm_w around 1 with both signs (drawn only with c.norm, which
  // keeps the other cases' draws as they were).
  std::vector<float> norm_w = c.norm ? RandomFloats(rng, c.k) : std::vector<float>(1);
  for (float& v : norm_w) v += v < 0 ? -0.5f : 0.5f;
  if (c.norm) {
    for (int r = 0; r < c.m; ++r) {
      for (int i = 0; i < c.k; ++i) x[r * c.k + i] *= (r + 1) * (i < c.k / 2 ? 3.0f : 0.25f);
    }
  }
  constexpr float kEps = 1e-5f;
  std::vector<float> xn = x;
  if (c.norm) cpu::RmsNorm(x.data(), norm_w.data(), c.m, c.k, kEps, xn.data());
  std::vector<float> want(c.m * c.n);
  cpu::GemmQuantized(xn.data(), {w.data(), DType::kF32, ToQuantType(c.format)},
                     c.bias ? bias.data() : nullptr, c.m, c.n, c.k, want.data(),
                     cpu::BlockKernel::kWidenedRows);
  if (c.accumulate) {
    for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
  }
  QuantGemmConfig base;
  base.n = c.n;
  base.k = c.k;
  base.format = c.format;
  base.has_bias = c.bias;
  base.accumulate = c.accumulate;
  base.warps = c.warps;
  base.norm = c.norm;
  QuantGemmConfig cfg = QuantGemmConfigFor(base, c.m);
  if (c.m_tile != 0) cfg.m_tile = c.m_tile;
  if (c.split != 0) cfg.split = c.split;
  if (c.cols != 0) cfg.cols = c.cols;
  EXPECT_EQ(cfg.m_tile, c.m_tile != 0 ? c.m_tile : std::min(c.m, 8));
  absl::StatusOr<std::string> ptx = GenerateQuantGemm(cfg);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EmuHarness h;
  const uint64_t dx = h.Upload(x), dw = h.Upload(w), db = h.Upload(bias);
  const uint64_t dy = h.Upload(y0), dnw = h.Upload(norm_w);
  const absl::Status st =
      h.Run(*ptx, kQuantGemmEntry, QuantGemmLaunch(cfg, c.m),
            c.norm ? std::vector<emu::KernelArg>{Ptr(dx), Ptr(dnw), Ptr(dw), Ptr(db), Ptr(dy),
                                                 U32(c.m), F32(kEps)}
                   : std::vector<emu::KernelArg>{Ptr(dx), Ptr(dw), Ptr(db), Ptr(dy), U32(c.m)});
  ASSERT_TRUE(st.ok()) << st;
  // Sums of up to 4128 products of magnitude <= 1 (448 s <= 1 for fp8) in two orders: f32
  // rounding stays far below 1e-4 of the typical |y| ~ sqrt(k) / 3.
  EXPECT_TRUE(Near(h.Download<float>(dy, want.size()), want, 1e-4f, 1e-4f));
}

TEST(QuantGemm, MatchesCpuQuantizedGemm) {
  using enum BlockFormat;
  const QuantGemmCase cases[] = {
      // K of 1 block (rows 2-byte aligned), odd block counts, and several steps of 64
      // blocks with a partial last one; N not a multiple of the warps.
      {1, 33, 32, kQ8_0, 0, 4, false, false},
      {1, 17, 96, kQ4_0, 0, 4, true, false},
      {2, 31, 160, kQ8_0, 0, 4, false, true},
      {3, 7, 2080, kQ4_0, 0, 2, true, true},
      {4, 40, 4128, kQ8_0, 0, 4, false, false},
      {5, 9, 544, kQ4_0, 0, 8, false, false},
      {6, 65, 128, kQ8_0, 0, 4, true, false},
      {7, 3, 2048, kQ8_0, 0, 1, false, false},
      {8, 100, 384, kQ4_0, 0, 4, false, true},
      {8, 12, 4096, kQ4_0, 0, 16, true, true},
      // More rows than a tile: 8-row tiles (and a smaller tile) re-read the blocks.
      {17, 21, 224, kQ8_0, 0, 4, false, true},
      {33, 5, 1056, kQ4_0, 0, 4, true, false},
      {10, 50, 96, kQ8_0, 3, 4, false, false},
      // fp8 rows (36-byte blocks, 4-byte aligned): one block, odd counts, partial steps.
      {1, 33, 32, kFp8E4M3, 0, 4, false, false},
      {2, 17, 96, kFp8E4M3, 0, 4, true, true},
      {3, 7, 2080, kFp8E4M3, 0, 2, false, true},
      {5, 40, 4128, kFp8E4M3, 0, 4, true, false},
      {8, 65, 160, kFp8E4M3, 0, 16, false, false},
      {19, 9, 544, kFp8E4M3, 0, 4, false, true},
      // int4_g128 rows (68-byte blocks of 128, four lanes each): one block, a step of 16
      // blocks and partial ones.
      {1, 33, 128, kInt4G128, 0, 4, false, false},
      {2, 31, 384, kInt4G128, 0, 4, true, false},
      {4, 7, 2176, kInt4G128, 0, 2, false, true},
      {6, 40, 4224, kInt4G128, 0, 4, true, true},
      {8, 17, 2048, kInt4G128, 0, 1, false, false},
      {7, 100, 640, kInt4G128, 0, 8, false, false},
      {21, 5, 1152, kInt4G128, 0, 4, true, false},
      {10, 12, 256, kInt4G128, 3, 4, false, true},
      // K split across 2 or 4 warps of a column (partial last steps in each slice, N not a
      // multiple of the CTA's columns, rows past a tile).
      {1, 33, 4160, kQ8_0, 0, 4, true, false, 2},
      {3, 17, 1024, kQ4_0, 0, 8, false, true, 4},
      {2, 9, 2176, kFp8E4M3, 0, 4, true, true, 4},
      {9, 31, 2560, kInt4G128, 0, 4, false, true, 2},
      {1, 12, 512, kInt4G128, 0, 16, true, false, 4},
      // Two columns per warp: N odd (the last warp's second column is past N), rows past
      // a tile, partial steps.
      {1, 35, 2080, kQ8_0, 0, 4, true, true, 1, 2},
      {2, 17, 1056, kQ4_0, 0, 2, false, false, 1, 2},
      {2, 9, 4128, kFp8E4M3, 0, 4, true, false, 1, 2},
      {1, 41, 2176, kInt4G128, 0, 4, false, true, 1, 2},
      {5, 13, 640, kInt4G128, 2, 1, true, true, 1, 2},
  };
  std::mt19937 rng(16);
  for (const QuantGemmCase& c : cases) {
    ExpectMatchesCpu(rng, c, RandomBlocks(rng, c.format, c.n, c.k));
  }
}

// The GEMV with its input rows' RMSNorm fused, for every format at 1..4 rows, K whole or
// split across 2 or 4 warps (each warp's sum of squares only its slice's until they meet),
// one column per warp or two (norm_w on x, or on the codes when the tile has more rows),
// odd N and partial steps, against the CPU's rmsnorm then quantized GEMM. Tiles of at most
// 4096 elements of x stage it normed in shared memory (the CTA's threads each a share of
// it, the last share partial where K / 4 is no multiple of the threads, an odd number of
// warps flipping the swizzle every other share), in one step or several; larger ones scale
// x in every warp.
TEST(QuantGemm, FusedRmsNormMatchesCpuRmsNormThenGemm) {
  using enum BlockFormat;
  const QuantGemmCase cases[] = {
      {1, 33, 32, kQ8_0, 0, 4, false, false, 1, 1, true},
      {2, 17, 2080, kQ4_0, 0, 4, true, false, 1, 1, true},
      {3, 31, 4128, kFp8E4M3, 0, 2, false, true, 1, 1, true},
      {4, 7, 2176, kInt4G128, 0, 4, true, true, 1, 1, true},
      {4, 40, 4096, kQ4_0, 0, 4, false, false, 1, 1, true},
      {4, 9, 2048, kQ8_0, 0, 2, true, false, 1, 1, true},
      {1, 33, 4160, kQ8_0, 0, 4, true, false, 2, 1, true},
      {3, 17, 1024, kQ4_0, 0, 8, false, true, 4, 1, true},
      {2, 9, 2176, kFp8E4M3, 0, 4, true, true, 4, 1, true},
      {4, 31, 2560, kInt4G128, 0, 4, false, true, 2, 1, true},
      {1, 35, 2080, kQ8_0, 0, 4, true, true, 1, 2, true},
      {2, 17, 1056, kQ4_0, 0, 2, false, false, 1, 2, true},
      {1, 9, 4128, kFp8E4M3, 0, 4, true, false, 1, 2, true},
      {2, 41, 2176, kInt4G128, 0, 4, false, true, 1, 2, true},
      {3, 13, 640, kInt4G128, 4, 1, true, true, 1, 2, true},
      {1, 19, 2048, kInt4G128, 0, 4, false, false, 1, 1, true},
      {1, 21, 4096, kInt4G128, 0, 3, true, false, 1, 2, true},
      {2, 13, 1536, kQ4_0, 0, 4, false, true, 2, 1, true},
      {1, 11, 2304, kInt4G128, 0, 4, false, false, 2, 1, true},
  };
  std::mt19937 rng(23);
  for (const QuantGemmCase& c : cases) {
    ExpectMatchesCpu(rng, c, RandomBlocks(rng, c.format, c.n, c.k));
  }
}

// Blocks written code by code rather than by the encoder: every E4M3 code but the NaN
// 0x7F/0xFF (max 448 at 0x7E, the subnormals m * 2^-9 at 0x01..0x07 and their negatives,
// both zeros) and int4 groups with zero points 0, 1, 8, 15 and 16 against nibbles 0..15.
TEST(QuantGemm, EdgeCodesMatchCpu) {
  std::mt19937 rng(61);
  {
    const int n = 9, k = 256;
    const int64_t row_bytes = QuantRowBytes(QuantType::kFp8E4M3, k);
    std::vector<uint8_t> w((n * row_bytes + 15) / 16 * 16, 0);
    int code = 0;
    for (int r = 0; r < n; ++r) {
      for (int b = 0; b < k / 32; ++b) {
        uint8_t* blk = w.data() + r * row_bytes + b * 36;
        const float s = r == 0 ? 1.0f / 448 : std::ldexp(1.0f, -3 - r);
        std::memcpy(blk, &s, 4);
        for (int j = 0; j < 32; ++j) {
          do code = (code + 1) % 256;
          while ((code & 0x7F) == 0x7F);
          blk[4 + j] = static_cast<uint8_t>(code);
        }
      }
    }
    for (int m : {1, 3, 8})
      ExpectMatchesCpu(rng, {m, n, k, BlockFormat::kFp8E4M3, 0, 4, true, false}, w);
  }
  {
    const int n = 10, k = 512;
    const int64_t row_bytes = QuantRowBytes(QuantType::kInt4G128, k);
    std::vector<uint8_t> w((n * row_bytes + 15) / 16 * 16, 0);
    const uint8_t zeros[] = {0, 15, 1, 8, 16};
    for (int r = 0; r < n; ++r) {
      for (int b = 0; b < k / 128; ++b) {
        uint8_t* blk = w.data() + r * row_bytes + b * 68;
        const uint16_t s = r % 2 == 0 ? 0x2C00 : 0x0001;  // 1/16, and the least subnormal f16
        std::memcpy(blk, &s, 2);
        blk[2] = zeros[(r + b) % 5];
        for (int j = 0; j < 64; ++j) {
          blk[4 + j] = static_cast<uint8_t>(((j + r) % 16) | ((15 - (j + b) % 16) << 4));
        }
      }
    }
    for (int m : {1, 2, 8, 9}) {
      ExpectMatchesCpu(rng, {m, n, k, BlockFormat::kInt4G128, 0, 4, false, true}, w);
    }
  }
}

TEST(QuantGemm, KeyNamesFormatAndRejectsPartialBlocks) {
  QuantGemmConfig cfg;
  cfg.n = 64;
  cfg.k = 96;
  cfg.format = BlockFormat::kQ4_0;
  cfg.m_tile = 8;
  EXPECT_EQ(cfg.Key(), "qgemm:n64:k96:q4_0:mt8:w4:s1:c1:" + cfg.target.Key());
  cfg.k = 100;
  const absl::StatusOr<std::string> ptx = GenerateQuantGemm(cfg);
  ASSERT_FALSE(ptx.ok());
  EXPECT_NE(ptx.status().message().find("k = 100"), std::string::npos) << ptx.status();
  cfg.k = 96;
  cfg.format = BlockFormat::kInt4G128;
  const absl::StatusOr<std::string> int4 = GenerateQuantGemm(cfg);
  ASSERT_FALSE(int4.ok());
  EXPECT_NE(int4.status().message().find("k = 96 is not a multiple of int4_g128's 128"),
            std::string::npos)
      << int4.status();
  for (BlockFormat f :
       {BlockFormat::kQ8_0, BlockFormat::kQ4_0, BlockFormat::kFp8E4M3, BlockFormat::kInt4G128}) {
    BlockFormat parsed{};
    EXPECT_TRUE(ParseBlockFormat(BlockFormatName(f), &parsed));
    EXPECT_EQ(parsed, f);
    EXPECT_EQ(BlockBytes(f), LayoutOf(ToQuantType(f)).block_bytes);
    EXPECT_EQ(BlockElems(f), LayoutOf(ToQuantType(f)).block_elems);
  }
  // Few columns split K (k/v of Llama-3.2-1B: 512 x 2048), whole rows otherwise; a split
  // must divide the warps and leave whole blocks in each slice.
  cfg.n = 512;
  cfg.k = 2048;
  EXPECT_EQ(QuantGemmConfigFor(cfg, 1).split, 4);
  EXPECT_EQ(QuantGemmLaunch(QuantGemmConfigFor(cfg, 1), 1).grid[0], 512u);
  cfg.n = 2048;
  EXPECT_EQ(QuantGemmConfigFor(cfg, 1).split, 1);
  EXPECT_EQ(QuantGemmConfigFor(cfg, 1).cols, 1);
  cfg.n = 16384;  // gate/up: two columns per warp up to 2 rows
  EXPECT_EQ(QuantGemmConfigFor(cfg, 2).cols, 2);
  EXPECT_EQ(QuantGemmLaunch(QuantGemmConfigFor(cfg, 2), 2).grid[0], 2048u);
  EXPECT_EQ(QuantGemmConfigFor(cfg, 3).cols, 1);
  cfg.cols = 2;
  cfg.split = 2;
  EXPECT_FALSE(GenerateQuantGemm(cfg).ok());
  cfg.cols = 1;
  cfg.split = 4;
  cfg.k = 384;
  EXPECT_FALSE(GenerateQuantGemm(cfg).ok());  // 96-element slices: not whole int4 blocks
  cfg.split = 1;
  cfg.n = 64;
  cfg.k = 96;
  const LaunchDims d = QuantGemmLaunch(QuantGemmConfigFor(cfg, 1000), 1000);
  EXPECT_EQ(d.grid[0], 16u);
  EXPECT_EQ(d.grid[1], 125u);
  EXPECT_EQ(d.block[0], 128u);
}

}  // namespace
}  // namespace ptxserve::kernels::testing

namespace ptxserve::kernels::testing {
namespace {

// The tensor-core form (QuantGemmConfig::tensor_cores) with `tile` on `w`'s blocks against
// the CPU backend's quantized GEMM. Its error bound: the activations and the dequantized
// weights are each rounded once to f16 (relative u = 2^-11, or absolute 2^-25 below f16's
// normals, 2^-14) and their products add in f32, so per output
// |got - want| <= (2 u + u^2) S + 2^-24 (sum |x| + sum |w|) + k 2^-23 S, with S =
// sum_k |x_k w_k| over the dequantized weights (the last term both sides' f32 sums).
void ExpectMmaMatchesCpu(std::mt19937& rng, const QuantGemmCase& c, const GemmMmaTile& tile,
                         const std::vector<uint8_t>& w) {
  SCOPED_TRACE(absl::StrCat("m ", c.m, " n ", c.n, " k ", c.k, " ", BlockFormatName(c.format),
                            " tile ", tile.bm, "x", tile.bn, " stages ", tile.stages));
  const std::vector<float> x = RandomFloats(rng, c.m * c.k);
  const std::vector<float> bias = RandomFloats(rng, c.n);
  const std::vector<float> y0 = RandomFloats(rng, c.m * c.n);
  std::vector<float> want(c.m * c.n);
  cpu::GemmQuantized(x.data(), {w.data(), DType::kF32, ToQuantType(c.format)},
                     c.bias ? bias.data() : nullptr, c.m, c.n, c.k, want.data(),
                     cpu::BlockKernel::kWidenedRows);
  if (c.accumulate) {
    for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
  }
  QuantGemmConfig cfg;
  cfg.n = c.n;
  cfg.k = c.k;
  cfg.format = c.format;
  cfg.has_bias = c.bias;
  cfg.accumulate = c.accumulate;
  cfg.tensor_cores = true;
  cfg.tile_m = tile.bm;
  cfg.tile_n = tile.bn;
  cfg.warps_m = tile.wm;
  cfg.warps_n = tile.wn;
  cfg.stages = tile.stages;
  ASSERT_TRUE(cfg.Validate().ok()) << cfg.Validate();
  absl::StatusOr<std::string> ptx = GenerateQuantGemm(cfg);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EmuHarness h;
  const uint64_t dx = h.Upload(x), dw = h.Upload(w), db = h.Upload(bias);
  const uint64_t dy = h.Upload(y0);
  const absl::Status st = h.Run(*ptx, kQuantGemmEntry, QuantGemmLaunch(cfg, c.m),
                                {Ptr(dx), Ptr(dw), Ptr(db), Ptr(dy), U32(c.m)});
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<float> got = h.Download<float>(dy, want.size());
  const int64_t row_bytes = QuantRowBytes(ToQuantType(c.format), c.k);
  std::vector<float> wrow(c.k);
  const double u = 0x1p-11;
  int misses = 0;
  for (int n = 0; n < c.n; ++n) {
    DequantizeRow(ToQuantType(c.format), w.data() + n * row_bytes, c.k, wrow.data());
    for (int m = 0; m < c.m; ++m) {
      double s = 0, sx = 0, sw = 0;
      for (int k = 0; k < c.k; ++k) {
        s += std::abs(double{x[m * c.k + k]} * wrow[k]);
        sx += std::abs(x[m * c.k + k]);
        sw += std::abs(wrow[k]);
      }
      const double bound = (2 * u + u * u + c.k * 0x1p-23) * s + 0x1p-24 * (sx + sw) +
                           0x1p-23 * std::abs(want[m * c.n + n]);
      const double err = std::abs(double{got[m * c.n + n]} - want[m * c.n + n]);
      if (!(err <= bound) && ++misses <= 5) {
        ADD_FAILURE() << "y[" << m << "][" << n << "] = " << got[m * c.n + n] << ", want "
                      << want[m * c.n + n] << " within " << bound;
      }
    }
  }
  EXPECT_EQ(misses, 0);
}

TEST(QuantGemmMma, MatchesCpuQuantizedGemm) {
  using enum BlockFormat;
  constexpr GemmMmaTile kWide = kMmaWideTile, kLarge = kMmaLargeTile;
  constexpr GemmMmaTile kEight{128, 256, 2, 4, 1, 3}, kHalf{64, 128, 2, 2, 1, 3};
  constexpr GemmMmaTile kFourStages{64, 64, 2, 2, 1, 4};
  struct Case {
    QuantGemmCase c;
    GemmMmaTile tile;
  };
  // Rows 9..300 past the tile's, N and K off tile multiples (K a multiple of the blocks),
  // bias and accumulate, each format at 2, 3 and 4 stages.
  const Case cases[] = {
      {{9, 33, 32, kQ8_0, 0, 4, false, false}, kWide},
      {{70, 65, 96, kQ8_0, 0, 4, true, true}, kLarge},
      {{300, 100, 160, kQ8_0, 0, 4, false, true}, kEight},
      {{17, 71, 224, kQ4_0, 0, 4, true, false}, kHalf},
      {{129, 40, 96, kQ4_0, 0, 4, false, true}, kFourStages},
      {{33, 9, 288, kFp8E4M3, 0, 4, true, true}, kWide},
      {{130, 130, 64, kFp8E4M3, 0, 4, false, false}, kLarge},
      {{65, 31, 384, kInt4G128, 0, 4, true, true}, kHalf},
      {{200, 67, 256, kInt4G128, 0, 4, false, false}, kEight},
      {{11, 17, 640, kInt4G128, 0, 4, true, false}, kFourStages},
  };
  std::mt19937 rng(160);
  for (const Case& k : cases) {
    ExpectMmaMatchesCpu(rng, k.c, k.tile, RandomBlocks(rng, k.c.format, k.c.n, k.c.k));
  }
}

// The tensor-core form has no fused RMSNorm: a config asking for both is refused by name.
TEST(QuantGemmMma, RejectsFusedNorm) {
  QuantGemmConfig c;
  c.tensor_cores = true;
  c.norm = true;
  const absl::Status s = c.CheckAcrossFields();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("norm"), std::string::npos) << s;
  c.norm = false;
  EXPECT_TRUE(c.CheckAcrossFields().ok());
}

// The form choice: the GEMV below kQuantMmaMinRows rows, the tensor-core form from there at
// Llama-3.2-1B's gate/up projection, with a valid config and launch either way.
TEST(QuantGemmMma, FormForPicksTensorCoresForManyRows) {
  QuantGemmConfig base;
  base.n = 16384;
  base.k = 2048;
  base.format = BlockFormat::kQ4_0;
  for (int64_t m : {1, 8, 31, 32, 64, 256, 2048}) {
    const QuantGemmConfig cfg = QuantGemmFormFor(base, m, 132);
    SCOPED_TRACE(absl::StrCat("m ", m, ": ", cfg.Key()));
    EXPECT_TRUE(cfg.Validate().ok()) << cfg.Validate();
    EXPECT_EQ(cfg.tensor_cores, m >= kQuantMmaMinRows);
    const LaunchDims d = QuantGemmLaunch(cfg, m);
    EXPECT_GT(d.grid[0] * d.grid[1] * d.block[0], 0u);
  }
  QuantGemmConfig bad = QuantGemmFormFor(base, 2048, 132);
  bad.tile_m = 48;
  EXPECT_FALSE(bad.Validate().ok());
}

}  // namespace
}  // namespace ptxserve::kernels::testing
