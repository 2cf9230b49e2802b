// The quantized GEMV (kernels/gemm_quant.h) on the emulator against the CPU backend's
// quantized GEMM (engine/cpu), for q8_0 and q4_0 at odd shapes and batches of 1..8 rows
// and more, and through the registry's key and launch rules.
#include "kernels/gemm_quant.h"

#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/gemm_tiles.h"
#include "engine/model/quant.h"
#include "gtest/gtest.h"
#include "tests/kernels/emu_harness.h"

namespace ptxserve::kernels::testing {
namespace {

QuantType ToQuantType(BlockFormat f) {
  return f == BlockFormat::kQ8_0 ? QuantType::kQ8_0 : QuantType::kQ4_0;
}

struct QuantGemmCase {
  int m, n, k;
  BlockFormat format;
  int m_tile;  // 0: QuantGemmConfigFor's
  int warps;
  bool bias, accumulate;
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
  };
  std::mt19937 rng(16);
  for (const QuantGemmCase& c : cases) {
    SCOPED_TRACE(absl::StrCat("m ", c.m, " n ", c.n, " k ", c.k, " ", BlockFormatName(c.format),
                              " warps ", c.warps));
    const std::vector<float> x = RandomFloats(rng, c.m * c.k);
    const std::vector<uint8_t> w = RandomBlocks(rng, c.format, c.n, c.k);
    const std::vector<float> bias = RandomFloats(rng, c.n);
    const std::vector<float> y0 = RandomFloats(rng, c.m * c.n);
    // The widened-rows kernel: the f32 GEMM over the dequantized rows, which the GEMV
    // computes too, in another order of sums.
    std::vector<float> want(c.m * c.n);
    cpu::GemmQuantized(x.data(), {w.data(), DType::kF32, ToQuantType(c.format)},
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
    QuantGemmConfig cfg = QuantGemmConfigFor(base, c.m);
    if (c.m_tile != 0) cfg.m_tile = c.m_tile;
    EXPECT_EQ(cfg.m_tile, c.m_tile != 0 ? c.m_tile : std::min(c.m, 8));
    absl::StatusOr<std::string> ptx = GenerateQuantGemm(cfg);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    EmuHarness h;
    const uint64_t dx = h.Upload(x), dw = h.Upload(w), db = h.Upload(bias);
    const uint64_t dy = h.Upload(y0);
    const absl::Status st = h.Run(*ptx, kQuantGemmEntry, QuantGemmLaunch(cfg, c.m),
                                  {Ptr(dx), Ptr(dw), Ptr(db), Ptr(dy), U32(c.m)});
    ASSERT_TRUE(st.ok()) << st;
    // Sums of up to 4128 products of magnitude <= 1 in two orders: f32 rounding stays far
    // below 1e-4 of the typical |y| ~ sqrt(k) / 3.
    EXPECT_TRUE(Near(h.Download<float>(dy, want.size()), want, 1e-4f, 1e-4f));
  }
}

TEST(QuantGemm, KeyNamesFormatAndRejectsPartialBlocks) {
  QuantGemmConfig cfg;
  cfg.n = 64;
  cfg.k = 96;
  cfg.format = BlockFormat::kQ4_0;
  cfg.m_tile = 8;
  EXPECT_EQ(cfg.Key(), "qgemm:n64:k96:q4_0:mt8:w4:" + cfg.target.Key());
  cfg.k = 100;
  const absl::StatusOr<std::string> ptx = GenerateQuantGemm(cfg);
  ASSERT_FALSE(ptx.ok());
  EXPECT_NE(ptx.status().message().find("k = 100"), std::string::npos) << ptx.status();
  const LaunchDims d = QuantGemmLaunch(QuantGemmConfigFor(cfg, 1000), 1000);
  EXPECT_EQ(d.grid[0], 16u);
  EXPECT_EQ(d.grid[1], 125u);
  EXPECT_EQ(d.block[0], 128u);
}

}  // namespace
}  // namespace ptxserve::kernels::testing
