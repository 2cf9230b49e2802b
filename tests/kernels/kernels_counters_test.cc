// Memory-traffic checks of the decode kernels with the emulator's counters
// (kernels/emu/counters.h), so a change that makes them read more than they must, or
// uncoalesced, fails here instead of showing up as a slower GPU:
//   - the decode GEMV reads each weight byte once per step (batches up to m_tile rows), in
//     fully coalesced 128-bit loads;
//   - decode attention reads each KV byte of the batch's contexts once per step (one CTA
//     per KV head holds the whole GQA group), in fully coalesced 128-bit loads;
//   - the quantized tensor-core GEMM (gemm_quant_mma.cc) runs the mma, ldmatrix, cp.async and
//     shared-memory accesses its tile math defines, and no more.
// Numerics are checked elsewhere (kernels_emu_ops_test, kernels_emu_test); inputs here
// are constants. Also measured: the emulator's slowdown with counters on (printed).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <memory>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "kernels/decode_attention.h"
#include "kernels/gemm.h"
#include "kernels/gemm_quant.h"
#include "tests/kernels/emu_harness.h"

namespace ptxserve::kernels::testing {
namespace {

constexpr uint16_t kOneF16 = 0x3c00;

emu::EmulatorOptions Counting() {
  emu::EmulatorOptions o;
  o.collect_counters = true;
  return o;
}

// The counters of the single launch `h` ran since the last call.
emu::KernelCounters Only(EmuHarness& h) {
  std::vector<emu::KernelCounters> all = h.emu().TakeCounters();
  EXPECT_EQ(all.size(), 1u);
  return all.empty() ? emu::KernelCounters{} : all.back();
}

// Bytes of `n` elements of `t` filled with ones (f32 or f16).
std::vector<uint8_t> Ones(ElemType t, size_t n) {
  std::vector<uint8_t> out(n * ElemSize(t));
  if (t == ElemType::kF32) {
    const float one = 1.0f;
    for (size_t i = 0; i < n; ++i) std::memcpy(&out[i * 4], &one, 4);
  } else {
    for (size_t i = 0; i < n; ++i) std::memcpy(&out[i * 2], &kOneF16, 2);
  }
  return out;
}

struct GemvCase {
  int m, n, k;
  ElemType dt;
  // Weight sectors requested today (0: one per weight sector, the ideal).
  uint64_t requested_sectors = 0;
};

TEST(KernelCounters, GemvReadsEachWeightByteOnceInCoalescedLoads) {
  for (const GemvCase& c :
       {GemvCase{1, 64, 1024, ElemType::kF16}, GemvCase{4, 40, 512, ElemType::kF16},
        GemvCase{8, 33, 256, ElemType::kF32},
        // Rows of 2000 bytes: odd rows start mid-sector, so each of
        // their 512-byte loads spans 17 sectors and the sector two
        // consecutive loads share is requested twice: 8 rows x 63 + 8
        // x 66 sectors, where the rows span 8 x 63 + 8 x 64 (and DRAM
        // sees 1000). The layout's doing, not the kernel's.
        GemvCase{3, 16, 1000, ElemType::kF16, 1032}}) {
    SCOPED_TRACE(absl::StrCat("m ", c.m, " n ", c.n, " k ", c.k, " ", ElemTypeName(c.dt)));
    GemmConfig base;
    base.n = c.n;
    base.k = c.k;
    base.weight_dtype = c.dt;
    const GemmConfig cfg = GemmConfigFor(base, c.m, /*sm_count=*/1);
    ASSERT_FALSE(cfg.tiled);
    absl::StatusOr<std::string> ptx = GenerateGemm(cfg);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    EmuHarness h(Counting());
    const uint64_t dx = h.Upload(std::vector<float>(c.m * c.k, 1.0f));
    const std::vector<uint8_t> w = Ones(c.dt, static_cast<size_t>(c.n) * c.k);
    const uint64_t dw = h.Upload(w), dy = h.Alloc(c.m * c.n * 4);
    ASSERT_TRUE(
        h.Run(*ptx, kGemmEntry, GemmLaunch(cfg, c.m), {Ptr(dx), Ptr(dw), Ptr(0), Ptr(dy), U32(c.m)})
            .ok());
    EXPECT_EQ(h.Download<float>(dy, 1)[0], static_cast<float>(c.k));
    const emu::KernelCounters kc = Only(h);
    const emu::BufferTraffic* wt = kc.Buffer(dw);
    ASSERT_NE(wt, nullptr);
    const uint64_t w_sectors = (w.size() + 31) / 32;
    // DRAM sees each weight sector once (m <= m_tile: one CTA row streams the weights).
    EXPECT_EQ(wt->dram_read_bytes, w_sectors * 32);
    if (c.requested_sectors == 0) {
      // ... and so do the caches: no warp requests a weight sector twice, every load is
      // 32 lanes x 16 bytes in 16 sectors.
      EXPECT_EQ(wt->access.sectors, w_sectors);
      EXPECT_EQ(wt->access.sectors, wt->access.requests * 16);
    } else {
      EXPECT_EQ(wt->access.sectors, c.requested_sectors);
    }
    // The activations: every warp reads x, so the caches see it once per warp; DRAM once.
    const emu::BufferTraffic* xt = kc.Buffer(dx);
    EXPECT_EQ(xt->dram_read_bytes, static_cast<uint64_t>(c.m) * c.k * 4);
    if (c.dt == ElemType::kF32) {
      EXPECT_EQ(xt->access.sectors, xt->access.ideal_sectors);
    } else if (c.requested_sectors == 0) {  // (K on the 512-byte grid: no partial loads)
      // Not coalesced today: ideal is 16 sectors per 32 x 16-byte request, but with 16-bit
      // weights a lane takes 8 consecutive floats of x per chunk as two 16-byte loads, so
      // each load touches 32 half-used sectors (the second load hits the same ones).
      EXPECT_EQ(xt->access.sectors, 2 * xt->access.ideal_sectors);
    }
    EXPECT_EQ(kc.Buffer(dy)->dram_write_bytes, (c.m * c.n * 4 + 31) / 32 * 32u);
    // A multiply-add per weight and row, then a butterfly sum of each output's 32 lane
    // partials (5 adds in every lane).
    EXPECT_EQ(kc.fp32_flops, 2ull * c.m * c.n * c.k + 5ull * 32 * c.m * c.n);
    EXPECT_EQ(kc.tensor_flops, 0u);
    absl::PrintF(
        "gemv m %d n %d k %d %s: weights %u B, DRAM %u B, requested %u B, %.2f sectors/request "
        "(ideal %.2f); x %.2f sectors/request (ideal %.2f)\n",
        c.m, c.n, c.k, ElemTypeName(c.dt), w.size(), wt->dram_read_bytes, wt->access.sectors * 32,
        wt->access.SectorsPerRequest(),
        static_cast<double>(wt->access.ideal_sectors) / wt->access.requests,
        xt->access.SectorsPerRequest(),
        static_cast<double>(xt->access.ideal_sectors) / xt->access.requests);
  }
}

// A decode batch: one query row per sequence, blocks assigned in shuffled order.
struct DecodeBatch {
  std::vector<int32_t> seq_lens, block_tables;
  int32_t max_blocks = 0, num_blocks = 0;
};

DecodeBatch MakeDecodeBatch(const std::vector<int32_t>& lens, int block_size) {
  DecodeBatch b;
  b.seq_lens = lens;
  for (int32_t len : lens) {
    const int32_t nb = (len + block_size - 1) / block_size;
    b.max_blocks = std::max(b.max_blocks, nb);
    b.num_blocks += nb;
  }
  std::vector<int32_t> ids(b.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
  b.block_tables.assign(lens.size() * b.max_blocks, 0);
  int next = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int i = 0; i < (lens[s] + block_size - 1) / block_size; ++i) {
      b.block_tables[s * b.max_blocks + i] = ids[next++];
    }
  }
  return b;
}

struct AttnCase {
  int heads, kv_heads, head_dim, block_size;
  ElemType dt;
};

// K (or V) bytes the kernel requests today for one sequence of `len` tokens, per KV head
// and head chunk: every warp runs the CTA's iterations in lockstep, a tile of
// steps_per_tile steps per iteration, its sub-groups owning tokens it * tokens_per_iter +
// warp * tile + step * tokens_per_warp + s; a token past the end is clamped to the first
// token (so the shuffles and the barrier see every thread) and its lanes load that token
// again, in the same request as the step's other tokens.
uint64_t RequestedRowsToday(const DecodeAttentionShape& sh, int len) {
  const int tile = sh.tokens_per_warp * sh.steps_per_tile;
  const int per_iter = sh.num_warps * tile;
  const int iters = (len + per_iter - 1) / per_iter;
  uint64_t rows = 0;
  for (int it = 0; it < iters; ++it) {
    for (int w = 0; w < sh.num_warps; ++w) {
      for (int u = 0; u < sh.steps_per_tile; ++u) {
        std::vector<int> tokens;
        for (int s = 0; s < sh.tokens_per_warp; ++s) {
          const int t = it * per_iter + w * tile + u * sh.tokens_per_warp + s;
          tokens.push_back(t < len ? t : 0);
        }
        std::sort(tokens.begin(), tokens.end());
        rows += std::unique(tokens.begin(), tokens.end()) - tokens.begin();
      }
    }
  }
  return rows;
}

TEST(KernelCounters, DecodeAttentionReadsEachKvByteOnceInCoalescedLoads) {
  for (const AttnCase& c :
       {AttnCase{8, 2, 128, 16, ElemType::kF16}, AttnCase{4, 4, 64, 32, ElemType::kF16},
        AttnCase{16, 2, 128, 16, ElemType::kF32}}) {
    // Contexts on the kernel's 64-token grid, then off the block grid (partial last
    // blocks, a single token).
    for (const std::vector<int32_t>& lens :
         {std::vector<int32_t>{64, 192}, std::vector<int32_t>{1, 17, 33, 100, 250}}) {
      SCOPED_TRACE(absl::StrCat("heads ", c.heads, " kv ", c.kv_heads, " hd ", c.head_dim, " bs ",
                                c.block_size, " ", ElemTypeName(c.dt), " lens ",
                                absl::StrJoin(lens, ",")));
      DecodeAttentionConfig cfg;
      cfg.num_heads = c.heads;
      cfg.num_kv_heads = c.kv_heads;
      cfg.head_dim = c.head_dim;
      cfg.block_size = c.block_size;
      cfg.kv_dtype = c.dt;
      absl::StatusOr<std::string> ptx = GenerateDecodeAttention(cfg);
      ASSERT_TRUE(ptx.ok()) << ptx.status();
      absl::StatusOr<DecodeAttentionShape> shape = ShapeOf(cfg);
      ASSERT_TRUE(shape.ok());
      const DecodeBatch b = MakeDecodeBatch(lens, c.block_size);
      const int rows = static_cast<int>(lens.size());
      const size_t row_elems = static_cast<size_t>(c.kv_heads) * c.head_dim;
      const std::vector<uint8_t> pool = Ones(c.dt, b.num_blocks * c.block_size * row_elems);
      EmuHarness h(Counting());
      const uint64_t dq = h.Upload(std::vector<float>(rows * c.heads * c.head_dim, 0.5f));
      const uint64_t dk = h.Upload(pool), dv = h.Upload(pool);
      const uint64_t dbt = h.Upload(b.block_tables), dlen = h.Upload(b.seq_lens);
      const uint64_t dout = h.Alloc(rows * c.heads * c.head_dim * 4);
      ASSERT_TRUE(h.Run(*ptx, kDecodeAttentionEntry,
                        DecodeAttentionLaunch(*shape, c.kv_heads, rows, 1),
                        {Ptr(dq), Ptr(dk), Ptr(dv), Ptr(dbt), Ptr(dlen), Ptr(0), Ptr(0), Ptr(dout),
                         Ptr(0), Ptr(0), Ptr(0), U32(b.max_blocks), U32(rows), U32(rows),
                         F32(1.0f / std::sqrt(static_cast<float>(c.head_dim))), U32(0)})
                      .ok());
      EXPECT_EQ(h.Download<float>(dout, 1)[0], 1.0f);  // softmax-weighted ones
      const emu::KernelCounters kc = Only(h);
      // One token's row for one KV head, in whole sectors (head_dim * element size is a
      // multiple of 32 bytes).
      const uint64_t row_bytes = static_cast<uint64_t>(c.head_dim) * ElemSize(c.dt);
      uint64_t ideal = 0, today = 0;
      for (int32_t len : lens) {
        ideal += static_cast<uint64_t>(len) * c.kv_heads * row_bytes;
        today += RequestedRowsToday(*shape, len) * c.kv_heads * shape->head_chunks * row_bytes;
      }
      for (const uint64_t pool_addr : {dk, dv}) {
        const emu::BufferTraffic* t = kc.Buffer(pool_addr);
        ASSERT_NE(t, nullptr);
        // DRAM: each KV byte of the contexts once, nothing past them.
        EXPECT_EQ(t->dram_read_bytes, ideal);
        // Requests: ideally each byte once too (one CTA reads a KV head for its whole GQA
        // group). Met on the 64-token grid; off it, the last iteration's clamped tokens
        // re-load the first token (RequestedRowsToday) -- cache hits, not DRAM traffic,
        // but requests all the same.
        EXPECT_EQ(t->access.sectors * 32, today);
        if (lens[0] % 64 == 0) {
          EXPECT_EQ(today, ideal);
          // Fully coalesced: 32 lanes x 16 bytes, 16 sectors per request.
          EXPECT_EQ(t->access.sectors, t->access.requests * 16);
        }
        absl::PrintF(
            "attention %s hd %d lens %s, K/V pool: ideal %u B, DRAM %u B, requested %u B, "
            "%.2f sectors/request (ideal %.2f)\n",
            ElemTypeName(c.dt), c.head_dim, absl::StrJoin(lens, ","), ideal, t->dram_read_bytes,
            t->access.sectors * 32, t->access.SectorsPerRequest(),
            static_cast<double>(t->access.ideal_sectors) / t->access.requests);
      }
      EXPECT_EQ(kc.Buffer(dq)->dram_read_bytes,
                static_cast<uint64_t>(rows) * c.heads * c.head_dim * 4);
    }
  }
}

// One block of `f` whose 32 (int4_g128: 128) weights are all 1.0: scale 1 and code 1
// (q4_0's nibble 9 less 8, fp8's E4M3 0x38, int4's nibble 9 less the zero point 8).
std::vector<uint8_t> BlockOfOnes(BlockFormat f) {
  std::vector<uint8_t> b(BlockBytes(f));
  switch (f) {
    case BlockFormat::kQ8_0:
      std::memcpy(b.data(), &kOneF16, 2);
      std::fill(b.begin() + 2, b.end(), 1);
      break;
    case BlockFormat::kQ4_0:
      std::memcpy(b.data(), &kOneF16, 2);
      std::fill(b.begin() + 2, b.end(), 0x99);
      break;
    case BlockFormat::kFp8E4M3: {
      const float one = 1.0f;
      std::memcpy(b.data(), &one, 4);
      std::fill(b.begin() + 4, b.end(), 0x38);
      break;
    }
    case BlockFormat::kInt4G128:
      std::memcpy(b.data(), &kOneF16, 2);
      b[2] = 8;
      b[3] = 0;
      std::fill(b.begin() + 4, b.end(), 0x99);
      break;
  }
  return b;
}

// Aligned 16-byte units a thread copies into its staging per row and k step, and reads back
// whole (gemm_quant_mma.cc's BlockSource): 2 for q4_0 (an 18-byte block starting at most 14
// bytes into a unit), 3 for the others (int4_g128's third holds codes that straddle units,
// zero-filled where they do not).
int UnitsStaged(BlockFormat f) { return f == BlockFormat::kQ4_0 ? 2 : 3; }

// Aligned 16-byte units that k step t's cp.async copies read for a row whose first block
// starts 16-byte aligned (gemm_quant_mma.cc's BlockSource::Copy): a q8_0 or fp8 block (34 or
// 36 bytes, starting at most 14 or 12 bytes into a unit) spans 3; a q4_0 one (18 bytes) 2;
// an int4_g128 quarter one unit for its header
// and one for its 16 code bytes, plus the next when they straddle units: the block's codes
// start 68 b + 4 + 16 (t % 4) bytes into the row, on a unit boundary only for blocks
// b = t / 4 with b % 4 == 3.
int UnitsRead(BlockFormat f, int t) {
  switch (f) {
    case BlockFormat::kQ8_0:
    case BlockFormat::kFp8E4M3:
      return 3;
    case BlockFormat::kQ4_0:
      return 2;
    case BlockFormat::kInt4G128:
      break;
  }
  return (t / 4) % 4 == 3 ? 2 : 3;
}

struct QuantMmaCase {
  int m, n, k;
  BlockFormat format;
  GemmMmaTile tile;
};

// The tensor-core form's counters follow from its definition (gemm_mma.cc's loop over k
// steps of 32, gemm_quant_mma.cc's staging). The shapes are whole tiles (M % bm == 0,
// N % bn == 0, bn a multiple of 32) with rows of a multiple of 16 bytes, so every thread owns
// a row, and every row starts 16-byte aligned as the allocation does.
TEST(KernelCounters, QuantGemmMmaRunsItsTileMath) {
  using enum BlockFormat;
  constexpr GemmMmaTile k64x64{64, 64, 2, 2, 1, 3}, k16x64{16, 64, 1, 4, 1, 3},
      k64x128{64, 128, 2, 2, 1, 2};
  for (const QuantMmaCase& c :
       {QuantMmaCase{64, 128, 512, kQ8_0, k64x64}, QuantMmaCase{32, 128, 512, kQ8_0, k16x64},
        QuantMmaCase{32, 128, 512, kQ4_0, k16x64}, QuantMmaCase{64, 128, 256, kQ4_0, k64x128},
        QuantMmaCase{64, 128, 256, kFp8E4M3, k64x64}, QuantMmaCase{64, 128, 512, kInt4G128, k64x64},
        QuantMmaCase{32, 128, 512, kInt4G128, k16x64}}) {
    const GemmMmaTile& t = c.tile;
    SCOPED_TRACE(absl::StrCat("m ", c.m, " n ", c.n, " k ", c.k, " ", BlockFormatName(c.format),
                              " tile ", t.bm, "x", t.bn, " warps ", t.wm, "x", t.wn, " stages ",
                              t.stages));
    QuantGemmConfig cfg;
    cfg.n = c.n;
    cfg.k = c.k;
    cfg.format = c.format;
    cfg.tensor_cores = true;
    cfg.tile_m = t.bm;
    cfg.tile_n = t.bn;
    cfg.warps_m = t.wm;
    cfg.warps_n = t.wn;
    cfg.stages = t.stages;
    ASSERT_TRUE(cfg.Validate().ok()) << cfg.Validate();
    absl::StatusOr<std::string> ptx = GenerateQuantGemm(cfg);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    const int blocks_per_row = c.k / BlockElems(c.format);
    const int64_t row_bytes = int64_t{blocks_per_row} * BlockBytes(c.format);
    ASSERT_EQ(row_bytes % 16, 0);
    const std::vector<uint8_t> block = BlockOfOnes(c.format);
    std::vector<uint8_t> w;
    for (int b = 0; b < c.n * blocks_per_row; ++b) w.insert(w.end(), block.begin(), block.end());
    const uint64_t w_bytes = w.size();
    w.resize((w.size() + 15) / 16 * 16);  // readable to the next 16 bytes (gemm_quant.h)
    EmuHarness h(Counting());
    const uint64_t dx = h.Upload(std::vector<float>(static_cast<size_t>(c.m) * c.k, 1.0f));
    const uint64_t dw = h.Upload(w), dy = h.Alloc(static_cast<size_t>(c.m) * c.n * 4);
    ASSERT_EQ(dw % 32, 0u);
    const LaunchDims d = QuantGemmLaunch(cfg, c.m);
    ASSERT_TRUE(
        h.Run(*ptx, kQuantGemmEntry, d, {Ptr(dx), Ptr(dw), Ptr(0), Ptr(dy), U32(c.m)}).ok());
    const std::vector<float> y = h.Download<float>(dy, static_cast<size_t>(c.m) * c.n);
    EXPECT_EQ(y.front(), static_cast<float>(c.k));
    EXPECT_EQ(y.back(), static_cast<float>(c.k));
    const emu::KernelCounters kc = Only(h);

    // The grid: a CTA per bm x bn output tile, 32 wm wn threads, one k step of 32 a loop trip.
    const uint64_t m = c.m, n = c.n, k = c.k;
    const uint64_t col_tiles = n / t.bn, row_tiles = m / t.bm;
    ASSERT_EQ(kc.ctas, col_tiles * row_tiles);
    const int warps = t.wm * t.wn, steps = c.k / 32;
    // Warps that own weight rows: thread i stages row i of the tile (bn <= 32 wm wn here).
    ASSERT_LE(t.bn, 32 * warps);
    const uint64_t row_warps = t.bn / 32;

    // Tensor cores: per warp and k16, mi = bm / wm / 16 m16 tiles by nj = bn / wn / 8 n8
    // tiles of mma.m16n8k16, their fragments by mi + nj / 2 ldmatrix.x4: M/16 x N/8 x K/16
    // mma over the grid, 2 x 16 x 8 x 16 FLOPs each.
    const uint64_t mi = t.bm / t.wm / 16, nj = t.bn / t.wn / 8;
    const uint64_t k16s = kc.ctas * warps * steps * 2;
    const uint64_t mma = m / 16 * (n / 8) * (k / 16);
    EXPECT_EQ(k16s * mi * nj, mma);
    EXPECT_EQ(kc.tensor_flops, mma * 2 * 16 * 8 * 16);
    const uint64_t ldmatrix = k16s * (mi + nj / 2);
    EXPECT_EQ(kc.Instructions(emu::InstrClass::kTensor), mma + ldmatrix);

    // cp.async: each owning warp copies its rows' units of every k step once (int4_g128's
    // zero-filled one included), and every warp commits a group per step and per prologue
    // stage and waits once per step.
    int units_issued = 0, units_read = 0;
    for (int s = 0; s < steps; ++s) {
      units_issued += UnitsStaged(c.format);
      units_read += UnitsRead(c.format, s);
    }
    EXPECT_EQ(kc.Instructions(emu::InstrClass::kAsyncCopy),
              kc.ctas * (row_warps * units_issued + warps * (t.stages - 1 + 2 * steps)));

    // Weights: DRAM sees each quantized byte once (the units of consecutive steps and rows
    // tile the rows with no gap, up to the next 16 bytes). The caches see a CTA's bn rows
    // once per CTA, so each weight unit once per row tile, and one sector per lane and unit:
    // rows lie at least 128 bytes apart, so 32 sectors per request where 16 would carry
    // the same bytes (a sector's other half is the neighbouring unit, copied a request
    // earlier or later by the same thread).
    const emu::BufferTraffic* wt = kc.Buffer(dw);
    ASSERT_NE(wt, nullptr);
    EXPECT_EQ(wt->dram_read_bytes, (w_bytes + 31) / 32 * 32);
    EXPECT_EQ(wt->access.requests, kc.ctas * row_warps * units_read);
    EXPECT_EQ(wt->access.sectors, row_tiles * n * units_read);
    EXPECT_EQ(wt->access.ideal_sectors * 2, wt->access.sectors);
    EXPECT_EQ(kc.global_load.requests, wt->access.requests + kc.Buffer(dx)->access.requests);

    // Activations: each CTA loads its bm rows of x (f32, 16 bytes a lane, 8 lanes a 128-byte
    // row piece), fully coalesced, once per column tile; DRAM once.
    const emu::BufferTraffic* xt = kc.Buffer(dx);
    ASSERT_NE(xt, nullptr);
    EXPECT_EQ(xt->dram_read_bytes, m * k * 4);
    EXPECT_EQ(xt->access.sectors, col_tiles * m * k * 4 / 32);
    EXPECT_EQ(xt->access.sectors, xt->access.ideal_sectors);
    EXPECT_EQ(kc.Buffer(dy)->dram_write_bytes, m * n * 4);

    // Shared memory. Stores: each thread's activation chunks (one 8-byte store a round, four
    // rows of 20 words per warp at 0, 16, 8, 24 words mod 32) and the decoded f16 rows (four
    // 16-byte stores a row, rows of 20 words: 8 lanes cover the 32 banks) are conflict-free.
    const uint64_t a_rounds = static_cast<uint64_t>(t.bm) * 8 / (32 * warps);
    EXPECT_EQ(kc.shared_store.requests, kc.ctas * steps * (warps * a_rounds + row_warps * 4));
    EXPECT_EQ(kc.shared_store.BankConflicts(), 0u);
    // Loads: ldmatrix reads rows of 80 bytes, 8 rows of a matrix in distinct bank groups: its
    // ideal 4 wavefronts. The staging reads are 16-byte loads of a thread's units, one per
    // unit staged: lane l's unit at 48 l bytes (12 l words) from lane 0's, so lanes l and
    // l + 8 share a 16-byte bank group (96 words apart, 0 mod 32) and lanes 0..7 take the
    // groups at 0, 12, 24, 4, 16, 28, 8, 20 words mod 32, all 8: each bank holds 4 distinct
    // words of the warp's 128, the ideal 4 wavefronts.
    const uint64_t staging_loads = kc.ctas * row_warps * steps * UnitsStaged(c.format);
    EXPECT_EQ(kc.shared_load.requests, ldmatrix + staging_loads);
    EXPECT_EQ(kc.shared_load.ideal_wavefronts, 4 * ldmatrix + 4 * staging_loads);
    EXPECT_EQ(kc.shared_load.BankConflicts(), 0u);

    absl::PrintF(
        "qgemm tc %s m %d n %d k %d tile %dx%d: %u mma, %u ldmatrix; weights %u B, DRAM %u B, "
        "requested %u B (%.1f sectors/request, ideal %.1f); shared loads %u, bank conflicts "
        "%u wavefronts\n",
        BlockFormatName(c.format), c.m, c.n, c.k, t.bm, t.bn, mma, ldmatrix, w_bytes,
        wt->dram_read_bytes, wt->access.sectors * 32, wt->access.SectorsPerRequest(),
        static_cast<double>(wt->access.ideal_sectors) / wt->access.requests,
        kc.shared_load.requests, kc.shared_load.BankConflicts());
  }
}

// CPU time of the calling thread (the emulator runs a launch on it with num_threads 1):
// less disturbed than wall time by other work on a shared machine.
double ThreadSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Not a pass/fail figure (shared CI machines time poorly): the slowdown is printed for the
// record. What is checked is that counting changes nothing the kernel computes.
TEST(KernelCounters, CountingLeavesResultsAloneAndItsCostIsPrinted) {
  GemmConfig base;
  base.n = 512;
  base.k = 2048;
  const GemmConfig cfg = GemmConfigFor(base, 2, /*sm_count=*/1);
  absl::StatusOr<std::string> ptx = GenerateGemm(cfg);
  ASSERT_TRUE(ptx.ok());
  const LaunchDims d = GemmLaunch(cfg, 2);
  std::unique_ptr<EmuHarness> h[2];
  emu::FunctionHandle fn[2];
  std::vector<emu::KernelArg> args[2];
  uint64_t dy[2];
  for (int on = 0; on < 2; ++on) {
    emu::EmulatorOptions o;
    o.collect_counters = on != 0;
    o.num_threads = 1;
    h[on] = std::make_unique<EmuHarness>(o);
    std::mt19937 rng(1);
    const uint64_t dx = h[on]->Upload(RandomFloats(rng, 2 * base.k));
    const uint64_t dw = h[on]->Upload(Ones(ElemType::kF16, static_cast<size_t>(base.n) * base.k));
    dy[on] = h[on]->Alloc(2 * base.n * 4);
    args[on] = {Ptr(dx), Ptr(dw), Ptr(0), Ptr(dy[on]), U32(2)};
    auto m = h[on]->emu().LoadModule(*ptx);
    ASSERT_TRUE(m.ok());
    fn[on] = *h[on]->emu().GetFunction(*m, kGemmEntry);
  }
  // Interleaved, the fastest of each: both see the same machine.
  double best[2] = {1e30, 1e30};
  constexpr int kReps = 7;
  for (int rep = 0; rep < kReps; ++rep) {
    for (int on = 0; on < 2; ++on) {
      const double t0 = ThreadSeconds();
      ASSERT_TRUE(h[on]
                      ->emu()
                      .Launch(fn[on], {d.grid[0], d.grid[1], d.grid[2]},
                              {d.block[0], d.block[1], d.block[2]}, d.shared_bytes, args[on])
                      .ok());
      best[on] = std::min(best[on], ThreadSeconds() - t0);
    }
  }
  EXPECT_EQ(h[0]->Download<float>(dy[0], 2 * base.n), h[1]->Download<float>(dy[1], 2 * base.n));
  EXPECT_TRUE(h[0]->emu().TakeCounters().empty());
  EXPECT_EQ(h[1]->emu().TakeCounters().size(), static_cast<size_t>(kReps));
  absl::PrintF("gemv 2x512x2048 f16, one host thread: %.4f s counters off, %.4f s on (x%.2f)\n",
               best[0], best[1], best[1] / best[0]);
}

}  // namespace
}  // namespace ptxserve::kernels::testing
