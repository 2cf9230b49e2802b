// Linear layer over block-quantized weights (GGML q8_0 and q4_0, as a GGUF stores them):
// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) (+ y[m, n] when accumulate), f32
// accumulation, the layout and arguments of kernels/gemm.h with w as blocks.
//
// Contract (device pointers, row-major, non-aliasing): GemmArgs, in .param order, with w
// N rows of K / 32 blocks, each block a little-endian f16 scale d then its codes:
//   q8_0: 34 bytes, int8 q[32]                 w[n, k] = d * q[k % 32]
//   q4_0: 18 bytes, uint8 qs[16] (elements 0..15 the low nibbles, 16..31 the high)
//                                              w[n, k] = d * (nibble - 8)
// The w allocation is readable up to the next multiple of 16 bytes past its last block
// (the kernel loads whole aligned 16-byte units; the bytes past the end are never used).
//
// One form, the GEMV: one warp per output column streams its row of blocks once per tile
// of m_tile rows. Rows of blocks are only 2-byte aligned (34 and 18 bytes per block), so a
// warp reads a run of 64 blocks as the aligned 16-byte units that cover it, one unit per
// lane and load (coalesced: every sector a load touches is one the row needs), stages them
// in shared memory, then each lane decodes whole blocks from there (bfe, cvt to f32) and
// adds d * (x . codes) per block and row, in f32: the f32 GEMM over the dequantized weights
// up to f32 rounding. Batches of M <= m_tile read the weights once; larger ones once per
// 8-row tile.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/config_fields.h"
#include "kernels/gemm.h"

namespace ptxserve::kernels {

inline constexpr char kQuantGemmEntry[] = "qgemm";

// The block formats the kernel decodes.
enum class BlockFormat : uint8_t { kQ8_0, kQ4_0 };
absl::string_view BlockFormatName(BlockFormat f);  // "q8_0", "q4_0"
bool ParseBlockFormat(absl::string_view s, BlockFormat* out);
inline absl::string_view KeyText(BlockFormat f) { return BlockFormatName(f); }
inline constexpr int kQuantBlockElems = 32;
constexpr int BlockBytes(BlockFormat f) { return f == BlockFormat::kQ8_0 ? 34 : 18; }

struct QuantGemmConfig : KernelConfig<QuantGemmConfig, kQuantGemmEntry> {
  int n = 4096;  // output features
  int k = 4096;  // input features, a multiple of 32
  BlockFormat format = BlockFormat::kQ8_0;
  bool has_bias = false;
  bool accumulate = false;  // y += x w^T (fuses the residual add)
  int m_tile = 4;           // token rows per CTA, 1..8
  int warps = 4;            // output columns per CTA (one per warp), 1..16
  ptx::Target target;
  int Threads() const { return warps * 32; }
  using C = QuantGemmConfig;
  static constexpr auto kFields = std::make_tuple(
      Field("n", &C::n).Key("n").Range(1, 1 << 24),
      Field("k", &C::k).Key("k").Range(32, 1 << 20, kQuantBlockElems),
      Field("format", &C::format).Key(""), Field("has_bias", &C::has_bias).Key("bias"),
      Field("accumulate", &C::accumulate).Key("acc"),
      Field("m_tile", &C::m_tile).Key("mt").Range(1, 8),
      Field("warps", &C::warps).Key("w").Range(1, 16));
};

absl::StatusOr<std::string> GenerateQuantGemm(const QuantGemmConfig& cfg);
// grid (ceil(N / warps), ceil(M / m_tile)), warps * 32 threads.
LaunchDims QuantGemmLaunch(const QuantGemmConfig& cfg, int64_t m);
// The form for batches of up to `m` rows: `base` with m_tile = min(m, 8) (at most 8 rows
// read the blocks once; more rows re-read them once per 8-row tile, from L2 when they fit).
QuantGemmConfig QuantGemmConfigFor(QuantGemmConfig base, int64_t m);

}  // namespace ptxserve::kernels
