// Linear layer over block-quantized weights (GGML q8_0 and q4_0, as a GGUF stores them, and
// the row blocks Hugging Face fp8/AWQ/GPTQ checkpoints load into, engine/model/quant.h):
// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) (+ y[m, n] when accumulate), f32
// accumulation, the layout and arguments of kernels/gemm.h with w as blocks.
//
// Contract (device pointers, row-major, non-aliasing): GemmArgs, in .param order, with w
// N rows of K / BlockElems blocks, each block its scale then its codes:
//   q8_0:      34 bytes, f16 d, int8 q[32]         w[n, k] = d * q[k % 32]
//   q4_0:      18 bytes, f16 d, uint8 qs[16] (elements 0..15 the low nibbles, 16..31 the
//              high)                               w[n, k] = d * (nibble - 8)
//   fp8_e4m3:  36 bytes, f32 s, uint8 e4m3[32]     w[n, k] = s * e4m3 (0x7F, E4M3's NaN,
//              which no encoder writes, reads as 480)
//   int4_g128: 68 bytes for 128 elements, f16 s, uint8 z, uint8 pad, uint8 qs[64] (element
//              2i the low nibble of qs[i], 2i + 1 the high one)   w[n, k] = s * (q - z)
// all little-endian. The w allocation is readable up to the next multiple of 16 bytes past
// its last block (the kernel loads whole aligned 16-byte units; the bytes past the end are
// never used).
//
// One form, the GEMV: one warp per output column streams its row of blocks once per tile
// of m_tile rows. Rows of blocks are only 2- or 4-byte aligned, so a warp reads a run of
// 2048 elements' blocks as the aligned 16-byte units that cover it, one unit per lane and
// load (coalesced: every sector a load touches is one the row needs), stages them in shared
// memory, then each lane decodes 32 elements at a time from there (a whole block, or a
// quarter of an int4_g128 block) and adds scale * (x . codes) per 32 elements and row, in
// f32: the f32 GEMM over the dequantized weights up to f32 rounding. The codes become f32
// exactly: q8_0 by bfe and cvt; fp8 two at a time as f16x2 by bit operations (E4M3's bits
// moved into an f16's, which is the code's value times 2^-8 for every code, subnormals
// included), then cvt.f32.f16 (no cvt from e4m3 needed, so sm_80 and sm_90 run the same
// text); q4_0 and int4 nibbles, each masked into its byte, by one prmt under 2^23's exponent
// byte (the f32 2^23 + q) and one subtraction of 2^23 + the zero point (8 or z).
// Batches of M <= m_tile read the weights once; larger ones once per 8-row tile. With
// split > 1 the warps of a column each take a contiguous slice of K / split; with cols 2 a
// warp stages and decodes two columns' rows side by side, loading x once for both.
// With norm, the input rows' RMSNorm is fused (NormGemmArgs, in .param order). Where the
// tile's rows of x fit 16 KiB, the CTA's threads first stage x * norm_w in shared memory,
// each a share of it, and add up the rows' squares (once per CTA rather than once per
// warp), and the warps read the staged rows in place of x. Larger tiles work as the f16
// GEMV: each lane sums its rows' squares as it loads x (the split slices' sums meet in
// shared memory with the products') and norm_w scales x or the codes as they load. The
// sums are scaled by 1 / sqrt(mean + eps) at the end.
//
// The tensor-core form (tensor_cores, gemm_quant_mma.cc) for batches and prefill: the f16
// tensor-core GEMM (gemm_mma.cc) whose CTAs stage their weight tile's blocks raw by cp.async
// and dequantize them to f16 into its shared tiles, so a CTA's weight rows are read once
// per bm rows instead of once per 8.
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
enum class BlockFormat : uint8_t { kQ8_0, kQ4_0, kFp8E4M3, kInt4G128 };
// "q8_0", "q4_0", "fp8_e4m3", "int4_g128" (engine/model/quant.h's spelling).
absl::string_view BlockFormatName(BlockFormat f);
bool ParseBlockFormat(absl::string_view s, BlockFormat* out);
inline absl::string_view KeyText(BlockFormat f) { return BlockFormatName(f); }
// The elements a lane decodes at a time; every block holds a whole number of them.
inline constexpr int kQuantLaneElems = 32;
constexpr int BlockElems(BlockFormat f) { return f == BlockFormat::kInt4G128 ? 128 : 32; }
constexpr int BlockBytes(BlockFormat f) {
  switch (f) {
    case BlockFormat::kQ8_0:
      return 34;
    case BlockFormat::kQ4_0:
      return 18;
    case BlockFormat::kFp8E4M3:
      return 36;
    case BlockFormat::kInt4G128:
      break;
  }
  return 68;
}

struct QuantGemmConfig : KernelConfig<QuantGemmConfig, kQuantGemmEntry> {
  int n = 4096;  // output features
  int k = 4096;  // input features, a multiple of BlockElems(format)
  BlockFormat format = BlockFormat::kQ8_0;
  bool has_bias = false;
  bool accumulate = false;  // y += x w^T (fuses the residual add)
  // The input rows' RMSNorm fused (NormGemmArgs): x is the un-normalised rows.
  bool norm = false;
  int m_tile = 4;  // token rows per CTA, 1..8
  int warps = 4;   // warps per CTA, 1..16
  int split = 1;   // warps per output column, each a slice of K: 1, 2 or 4
  int cols = 1;    // output columns per warp (with split 1): 1 or 2
  // The tensor-core form, its CTA tile in the fields after it (GemmMmaTile's, one k slice;
  // the GEMV fields above unused).
  bool tensor_cores = false;
  int tile_m = 64, tile_n = 64, warps_m = 2, warps_n = 2, stages = 2;
  ptx::Target target;
  int Threads() const { return 32 * (tensor_cores ? warps_m * warps_n : warps); }
  int Columns() const { return warps * cols / split; }  // output columns per CTA
  // The GEMV on sm_90 is a programmatic dependent launch, as the f16 one
  // (GemmConfig::GridDependent); the tensor-core form waits for nothing.
  bool GridDependent() const { return !tensor_cores && target.sm >= 90; }
  using C = QuantGemmConfig;
  static constexpr auto kFields = std::make_tuple(
      Field("n", &C::n).Key("n").Range(1, 1 << 24),
      Field("k", &C::k).Key("k").Range(32, 1 << 20, kQuantLaneElems),
      Field("format", &C::format).Key(""), Field("has_bias", &C::has_bias).Key("bias"),
      Field("accumulate", &C::accumulate).Key("acc"), Field("norm", &C::norm).Key("norm"),
      Field("m_tile", &C::m_tile).Key("mt").Range(1, 8),
      Field("warps", &C::warps).Key("w").Range(1, 16),
      Field("split", &C::split).Key("s").Range(1, 4), Field("cols", &C::cols).Key("c").Range(1, 2),
      Field("tensor_cores", &C::tensor_cores).Key("tc"),
      Field("tile_m", &C::tile_m).KeyWhen("bm", &C::tensor_cores).Range(16, 256, 16),
      Field("tile_n", &C::tile_n).KeyWhen("bn", &C::tensor_cores).Range(16, 256, 16),
      Field("warps_m", &C::warps_m).KeyWhen("wm", &C::tensor_cores).Range(1, 4),
      Field("warps_n", &C::warps_n).KeyWhen("wn", &C::tensor_cores).Range(1, 4),
      Field("stages", &C::stages).KeyWhen("st", &C::tensor_cores).Range(2, 8));
  absl::Status CheckAcrossFields() const;
};

absl::StatusOr<std::string> GenerateQuantGemm(const QuantGemmConfig& cfg);
// grid (ceil(N / Columns()), ceil(M / m_tile)), warps * 32 threads.
LaunchDims QuantGemmLaunch(const QuantGemmConfig& cfg, int64_t m);
// The form for batches of up to `m` rows: `base` with m_tile = min(m, 8) (at most 8 rows
// read the blocks once; more rows re-read them once per 8-row tile, from L2 when they fit),
// and for few columns K split across 2 or 4 warps: a GEMV whose grid barely fills the GPU
// is bound by one warp's chain of instructions over its row, which a split shortens (the
// partial sums meet in shared memory, added in slice order); for many columns at m <= 2,
// two columns per warp.
QuantGemmConfig QuantGemmConfigFor(QuantGemmConfig base, int64_t m);
// The form for batches of up to `m` rows on a device of `sm_count` SMs: the GEMV
// (QuantGemmConfigFor) below kQuantMmaMinRows rows and while its 8-row tiles give at most
// 48 CTAs per SM; beyond, the tensor-core form with the largest of 128x256, 128x128,
// 64x128, 64x64 and 32x64 tiles that the batch fills and that gives at least 1.9 CTAs per
// SM, else 16x64. Rules fitted to the cost model's estimates, which cost_estimate_test
// prints at the Llama-3.2-1B shapes on h100 (4 warps a GEMV CTA, 132 SMs). The switch
// point is the same for every format, since both sides read the same blocks: q/o (2048
// columns) switches at 128 rows, gate/up (16384) at 32 (q8_0: q/o GEMV 36.1 us against
// 16x64 tiles 18.3 at 128 rows, GEMV 18.3 against 19.4 at 64; gate/up GEMV 71.7 against
// 32x64 25.5 at 32; int4_g128 alike, 35.2/18.1, 17.8/18.8, 69.9/22.4; fp8's 36 bytes
// per 32 weights and q4_0's 18 are within 6% of q8_0's 34 and int4_g128's 17). Never
// split-K (gemm_mma_source.h).
inline constexpr int64_t kQuantMmaMinRows = 32;
QuantGemmConfig QuantGemmFormFor(QuantGemmConfig base, int64_t m, int sm_count);

// The tensor-core form (gemm_quant_mma.cc): the f16 GemmConfig whose pipeline it runs, its
// checks (four or eight warps of whole 16x16 blocks, shared memory within the target's
// limit), launch (GemmLaunch's grid and threads, its own shared bytes) and generator.
GemmConfig QuantMmaGemmConfig(const QuantGemmConfig& cfg);
absl::Status CheckQuantGemmMma(const QuantGemmConfig& cfg);
LaunchDims QuantGemmMmaLaunch(const QuantGemmConfig& cfg, int64_t m);
namespace gen {
std::string QuantGemmMma(KernelBuilder& kb, const QuantGemmConfig& cfg);
}  // namespace gen

}  // namespace ptxserve::kernels
