// Generated kernels run on the PTX emulator against the CPU reference ops
// (engine/cpu/ops.h) within per-dtype tolerances. The emulator also fails a launch on
// any out-of-bounds access, uninitialised register read or barrier misuse, so every
// passing case is free of those too. Sizes deliberately miss tile multiples
// (17, 31, 33, 100, ...).
//
// The known PTX traps (DESIGN.md) and the tests that catch them:
//   broadcast after a shfl.down reduction -> KernelsEmuOps.RmsNormMatchesCpu (rows of
//     <= 128 elements reduce in one warp and must broadcast lane 0's sum);
//   no early exit before bar.sync -> every multi-warp case here and in
//     kernels_emu_ops_test (idle threads of partial tiles must reach the barriers; the
//     emulator reports a thread that exits while others wait);
//   4 elements per lane at head_dim 128 -> AttentionHeadDimLayouts and the f32
//     head_dim 128 cases of DecodeAttentionMatrix (plus GenerateTest.AttentionShapes);
//   separate shared slots for the global max/sum -> AttentionWarpCountsAgree (1-8
//     warps) and RmsNormMatchesCpu (dims 1000-5000 use 8 warps).
#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/cpu/ops.h"
#include "engine/model/dtype.h"
#include "gtest/gtest.h"
#include "kernels/decode_attention.h"
#include "kernels/flash_attention.h"
#include "tests/kernels/emu_harness.h"

namespace ptxserve::kernels::testing {
namespace {

std::vector<uint8_t> Convert(ElemType t, const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * ElemSize(t));
  ConvertFromFloat(ToDType(t), v.data(), v.size(), out.data());
  return out;
}

// ---------------------------------------------------------------- attention

// A ragged batch in the StepBatch layout with scattered (non-contiguous) blocks.
struct Batch {
  std::vector<int32_t> seq_lens, query_start, positions, block_tables;
  int32_t max_blocks = 0;
  int32_t num_blocks = 0;
  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
  int num_rows() const { return static_cast<int>(positions.size()); }
};

// rows[s] query rows per sequence (1 = decode), the last `rows[s]` positions.
Batch MakeBatch(std::mt19937& rng, const std::vector<int32_t>& lens,
                const std::vector<int32_t>& rows, int block_size) {
  Batch b;
  b.seq_lens = lens;
  b.query_start = {0};
  int total_blocks = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    const int nb = static_cast<int>(CeilDiv(lens[s], block_size));
    b.max_blocks = std::max(b.max_blocks, nb);
    total_blocks += nb;
    for (int r = 0; r < rows[s]; ++r) b.positions.push_back(lens[s] - rows[s] + r);
    b.query_start.push_back(b.query_start.back() + rows[s]);
  }
  b.num_blocks = total_blocks + 3;  // a few blocks nobody owns
  std::vector<int32_t> ids(b.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  b.block_tables.assign(lens.size() * b.max_blocks, 0);
  int next = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int i = 0; i < CeilDiv(lens[s], block_size); ++i) {
      b.block_tables[s * b.max_blocks + i] = ids[next++];
    }
  }
  return b;
}

struct AttnCase {
  int head_dim, group, block_size;
  ElemType dtype;
  bool split = false;
  bool ragged = false;
  int kv_heads = 2;
  int num_warps = 0;
  int partition = 64;  // tokens per split
  // The output's type (the model's activations): softmax and sums stay f32, the store rounds.
  ElemType out = ElemType::kF32;
};

std::string Name(const AttnCase& c) {
  return absl::StrCat("hd", c.head_dim, "_g", c.group, "_bs", c.block_size, "_",
                      ElemTypeName(c.dtype), c.split ? "_split" : "", c.ragged ? "_ragged" : "",
                      "_w", c.num_warps, c.out == ElemType::kF32 ? "" : "_out",
                      c.out == ElemType::kF32 ? "" : ElemTypeName(c.out));
}

void RunAttention(const AttnCase& c, const std::vector<int32_t>& lens,
                  const std::vector<int32_t>& rows) {
  SCOPED_TRACE(Name(c));
  std::mt19937 rng(c.head_dim * 131 + c.group * 7 + c.block_size);
  const Batch b = MakeBatch(rng, lens, rows, c.block_size);
  const int heads = c.kv_heads * c.group;
  const int64_t hd = c.head_dim;
  const std::vector<float> q = RandomFloats(rng, b.num_rows() * heads * hd, -2, 2);
  const int64_t pool_elems = int64_t{b.num_blocks} * c.kv_heads * c.block_size * hd;
  const std::vector<uint8_t> kp = Convert(c.dtype, RandomFloats(rng, pool_elems, -2, 2));
  const std::vector<uint8_t> vp = Convert(c.dtype, RandomFloats(rng, pool_elems, -2, 2));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  std::vector<float> want(q.size());
  cpu::PagedAttention(q.data(), b.positions.data(), b.query_start.data(), b.seq_lens.data(),
                      b.block_tables.data(), b.max_blocks, b.num_seqs(), heads, c.kv_heads, hd,
                      c.block_size, ToDType(c.dtype), kp.data(), vp.data(), scale, want.data());

  DecodeAttentionConfig cfg;
  cfg.num_heads = heads;
  cfg.num_kv_heads = c.kv_heads;
  cfg.head_dim = c.head_dim;
  cfg.block_size = c.block_size;
  cfg.kv_dtype = c.dtype;
  cfg.split = c.split;
  cfg.ragged = c.ragged;
  cfg.num_warps = c.num_warps;
  cfg.out_dtype = c.out;  // split: the partials stay f32, the merge's store rounds
  absl::StatusOr<std::string> ptx = GenerateDecodeAttention(cfg);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  absl::StatusOr<DecodeAttentionShape> shape = ShapeOf(cfg);
  ASSERT_TRUE(shape.ok());

  EmuHarness h;
  const uint64_t dq = h.Upload(q), dk = h.Upload(kp), dv = h.Upload(vp);
  const uint64_t dbt = h.Upload(b.block_tables), dlen = h.Upload(b.seq_lens);
  const uint64_t dqs = c.ragged ? h.Upload(b.query_start) : 0;
  const uint64_t dpos = c.ragged ? h.Upload(b.positions) : 0;
  const uint64_t dout = h.Alloc(q.size() * ElemSize(c.out));
  const int max_ctx = *std::max_element(lens.begin(), lens.end());
  // Splits of c.partition tokens: several for long sequences, and empty ones for short.
  const int partition = c.partition;
  const int splits = c.split ? static_cast<int>(CeilDiv(max_ctx, partition)) : 1;
  const uint64_t dpart = c.split ? h.Alloc(q.size() * 4 * splits) : 0;
  const uint64_t dlse = c.split ? h.Alloc(b.num_rows() * heads * 4 * splits) : 0;
  const LaunchDims dims = DecodeAttentionLaunch(*shape, c.kv_heads, b.num_rows(), splits);
  const size_t groups = size_t{dims.grid[0]} * dims.grid[1];
  const uint64_t dcount = c.split ? h.Upload(std::vector<uint32_t>(groups, 0)) : 0;
  auto run = [&] {
    return h.Run(*ptx, kDecodeAttentionEntry, dims,
                 {Ptr(dq), Ptr(dk), Ptr(dv), Ptr(dbt), Ptr(dlen), Ptr(dqs), Ptr(dpos), Ptr(dout),
                  Ptr(dpart), Ptr(dlse), Ptr(dcount), U32(b.max_blocks), U32(b.num_seqs()),
                  U32(b.num_rows()), F32(scale), U32(partition)});
  };
  const absl::Status st = run();
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(Near(DownloadAs(h, c.out, dout, q.size()), want, 2e-5f, 2e-4f + UnitRoundoff(c.out)));
  const std::vector<uint8_t> got = h.Download<uint8_t>(dout, q.size() * ElemSize(c.out));
  if (c.split) {
    // The merging CTAs left every count zero, so a second launch (a graph replay) merges
    // again; blocks run on several host threads, so another CTA may merge, in the same
    // split order: the same bits.
    EXPECT_EQ(h.Download<uint32_t>(dcount, groups), std::vector<uint32_t>(groups, 0));
    const absl::Status again_st = run();
    ASSERT_TRUE(again_st.ok()) << again_st;
    const std::vector<uint8_t> again = h.Download<uint8_t>(dout, got.size());
    EXPECT_EQ(again, got);
  }
}

// Decode: one query row per sequence, contexts from 1 to 600 tokens.
const std::vector<int32_t> kDecodeLens = {1, 17, 31, 33, 100, 600};

TEST(KernelsEmu, DecodeAttentionMatrix) {
  for (int hd : {64, 128}) {
    for (int group : {1, 4, 8}) {
      for (int bs : {16, 32}) {
        for (ElemType dt : {ElemType::kF32, ElemType::kF16}) {
          RunAttention({hd, group, bs, dt}, kDecodeLens, std::vector<int32_t>(6, 1));
        }
      }
    }
  }
}

// Flash-decoding: per-split partials (including empty splits of short sequences, 10
// splits of the longest) merged by the last CTA of each group with log-sum-exp weights must
// equal the unsplit result, and leave the split counters zero; with an f16/bf16 output (the
// model's activations) the partials stay f32 and only the merge's store rounds.
TEST(KernelsEmu, SplitAttentionWithMergeMatrix) {
  for (int hd : {64, 128}) {
    for (int group : {1, 4, 8}) {
      for (ElemType dt : {ElemType::kF32, ElemType::kF16, ElemType::kBF16}) {
        AttnCase c{hd, group, 16, dt, /*split=*/true};
        RunAttention(c, kDecodeLens, std::vector<int32_t>(6, 1));
      }
      for (ElemType out : {ElemType::kF16, ElemType::kBF16}) {
        AttnCase c{hd, group, 16, ElemType::kF16, /*split=*/true};
        c.out = out;
        RunAttention(c, kDecodeLens, std::vector<int32_t>(6, 1));
      }
    }
  }
  // A partition that is not a multiple of the block size or of the CTA's tokens per step.
  AttnCase odd{128, 4, 32, ElemType::kF16, true};
  odd.partition = 100;
  RunAttention(odd, kDecodeLens, std::vector<int32_t>(6, 1));
}

// The model's f16/bf16 activations: decode, split (the merge stores them) and ragged
// attention writing their output in that type.
TEST(KernelsEmu, AttentionWritesHalfOutputs) {
  for (ElemType out : {ElemType::kF16, ElemType::kBF16}) {
    for (bool split : {false, true}) {
      AttnCase c{128, 4, 16, ElemType::kF16, split};
      c.out = out;
      RunAttention(c, kDecodeLens, std::vector<int32_t>(6, 1));
    }
    AttnCase ragged{64, 2, 16, ElemType::kBF16, false, /*ragged=*/true};
    ragged.out = out;
    RunAttention(ragged, {5, 40, 17, 100}, {5, 1, 17, 33});
    AttnCase split_ragged{64, 4, 16, ElemType::kF16, true, /*ragged=*/true};
    split_ragged.out = out;
    RunAttention(split_ragged, {5, 40, 17, 300}, {5, 1, 17, 3});
  }
}

// Ragged (prefill / mixed) rows: several query rows per sequence, causal limits.
TEST(KernelsEmu, RaggedPrefillAttention) {
  const std::vector<int32_t> lens = {5, 40, 17, 600, 100, 1};
  const std::vector<int32_t> rows = {5, 1, 17, 3, 33, 1};
  for (int hd : {64, 128}) {
    for (int group : {1, 4}) {
      for (ElemType dt : {ElemType::kF32, ElemType::kF16}) {
        RunAttention({hd, group, 16, dt, false, /*ragged=*/true}, lens, rows);
      }
    }
  }
  AttnCase split_ragged{128, 8, 32, ElemType::kBF16, true, true};
  RunAttention(split_ragged, lens, rows);
}

// Trap: multi-warp merges keep per-warp (max, sum) slots apart from the values every
// output thread combines; 1, 2, 4 and 8 warps must agree with the reference.
TEST(KernelsEmu, AttentionWarpCountsAgree) {
  for (int warps : {1, 2, 4, 8}) {
    AttnCase c{128, 4, 16, ElemType::kF32};
    c.num_warps = warps;
    RunAttention(c, kDecodeLens, std::vector<int32_t>(6, 1));
  }
}

// Trap: head_dim 128 in f32 puts 4 elements (one 128-bit vector) in each of 32 lanes;
// 32, 96, 160 and 256 exercise the other lane layouts, block size 24 a non-power of 2.
TEST(KernelsEmu, AttentionHeadDimLayouts) {
  for (int hd : {32, 96, 128, 160, 256}) {
    for (ElemType dt : {ElemType::kF32, ElemType::kF16}) {
      RunAttention({hd, 2, 24, dt}, {1, 31, 33, 100}, {1, 1, 1, 1});
    }
  }
  // Wide GQA group: heads split over several CTAs per KV head.
  AttnCase wide{128, 32, 16, ElemType::kF16};
  wide.kv_heads = 1;
  RunAttention(wide, {17, 100}, {1, 1});
}

// Sequences with no context (seq_lens 0) produce zeros, split or not, without reading
// any block.
TEST(KernelsEmu, EmptyContextGivesZeros) {
  for (bool split : {false, true}) {
    DecodeAttentionConfig cfg;
    cfg.num_heads = 4;
    cfg.num_kv_heads = 2;
    cfg.head_dim = 64;
    cfg.kv_dtype = ElemType::kF32;
    cfg.split = split;
    absl::StatusOr<std::string> ptx = GenerateDecodeAttention(cfg);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    absl::StatusOr<DecodeAttentionShape> shape = ShapeOf(cfg);
    ASSERT_TRUE(shape.ok());
    const int rows = 2, splits = split ? 3 : 1, n = rows * 4 * 64;
    EmuHarness h;
    const std::vector<float> q(n, 1.0f);
    const uint64_t dq = h.Upload(q), pool = h.Alloc(4 * 2 * 16 * 64 * 4);
    const uint64_t dbt = h.Upload(std::vector<int32_t>{0, 0});
    const uint64_t dlen = h.Upload(std::vector<int32_t>{0, 0});
    const uint64_t dout = h.Alloc(n * 4), dpart = h.Alloc(n * 4 * splits);
    const uint64_t dlse = h.Alloc(rows * 4 * 4 * splits);
    const uint64_t dcount = h.Upload(std::vector<uint32_t>(rows * 4, 0));
    absl::Status st = h.Run(
        *ptx, kDecodeAttentionEntry, DecodeAttentionLaunch(*shape, cfg.num_kv_heads, rows, splits),
        {Ptr(dq), Ptr(pool), Ptr(pool), Ptr(dbt), Ptr(dlen), Ptr(0), Ptr(0), Ptr(dout),
         Ptr(split ? dpart : 0), Ptr(split ? dlse : 0), Ptr(split ? dcount : 0), U32(1), U32(rows),
         U32(rows), F32(0.125f), U32(16)});
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_TRUE(Near(h.Download<float>(dout, n), std::vector<float>(n, 0.0f), 0, 0)) << split;
  }
}

// ---------------------------------------------------------------- flash attention

struct FlashCase {
  int head_dim, group, block_size;
  ElemType dtype;
  int kv_heads = 2;
  ElemType out = ElemType::kF32;  // the output's type (the model's activations)
};

// Whole prompts, chunks after a cached prefix and decode rows, none a tile multiple: the
// last rows[s] of lens[s] positions.
const std::vector<int32_t> kFlashLens = {40, 100, 17, 1, 77, 300};
const std::vector<int32_t> kFlashRows = {40, 70, 17, 1, 1, 45};

// flash_attention against cpu::PagedAttention; the launch's counters. q and P are rounded to
// the KV type for the tensor cores (2^-11 relative for f16, 2^-8 for bf16): scores of
// |q.k| scale <= ~4 and outputs averaging |v| <= 2 stay within a few of those units.
emu::KernelCounters RunFlash(const FlashCase& c, const std::vector<int32_t>& lens,
                             const std::vector<int32_t>& rows) {
  SCOPED_TRACE(absl::StrCat("flash hd", c.head_dim, "_g", c.group, "_bs", c.block_size, "_",
                            ElemTypeName(c.dtype), "_out", ElemTypeName(c.out)));
  std::mt19937 rng(c.head_dim * 131 + c.group * 7 + c.block_size);
  const Batch b = MakeBatch(rng, lens, rows, c.block_size);
  const int heads = c.kv_heads * c.group;
  const int64_t hd = c.head_dim;
  const std::vector<float> q = RandomFloats(rng, b.num_rows() * heads * hd, -2, 2);
  const int64_t pool_elems = int64_t{b.num_blocks} * c.kv_heads * c.block_size * hd;
  const std::vector<uint8_t> kp = Convert(c.dtype, RandomFloats(rng, pool_elems, -2, 2));
  const std::vector<uint8_t> vp = Convert(c.dtype, RandomFloats(rng, pool_elems, -2, 2));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> want(q.size());
  cpu::PagedAttention(q.data(), b.positions.data(), b.query_start.data(), b.seq_lens.data(),
                      b.block_tables.data(), b.max_blocks, b.num_seqs(), heads, c.kv_heads, hd,
                      c.block_size, ToDType(c.dtype), kp.data(), vp.data(), scale, want.data());

  FlashAttentionConfig cfg;
  cfg.num_heads = heads;
  cfg.num_kv_heads = c.kv_heads;
  cfg.head_dim = c.head_dim;
  cfg.block_size = c.block_size;
  cfg.kv_dtype = c.dtype;
  cfg.out_dtype = c.out;
  absl::StatusOr<std::string> ptx = GenerateFlashAttention(cfg);
  EXPECT_TRUE(ptx.ok()) << ptx.status();
  if (!ptx.ok()) return {};
  emu::EmulatorOptions options;
  options.collect_counters = true;
  EmuHarness h(options);
  const uint64_t dq = h.Upload(q), dk = h.Upload(kp), dv = h.Upload(vp);
  const uint64_t dbt = h.Upload(b.block_tables), dqs = h.Upload(b.query_start);
  const uint64_t dpos = h.Upload(b.positions), dout = h.Alloc(q.size() * ElemSize(c.out));
  const absl::Status st =
      h.Run(*ptx, kFlashAttentionEntry, FlashAttentionLaunch(cfg, b.num_rows(), b.num_seqs()),
            {Ptr(dq), Ptr(dk), Ptr(dv), Ptr(dbt), Ptr(dqs), Ptr(dpos), Ptr(dout), U32(b.max_blocks),
             U32(b.num_seqs()), U32(b.num_rows()), F32(scale)});
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok()) return {};
  const float tol = c.dtype == ElemType::kF16 ? 2e-3f : 1.5e-2f;
  EXPECT_TRUE(Near(DownloadAs(h, c.out, dout, q.size()), want, tol, tol + UnitRoundoff(c.out)));
  std::vector<emu::KernelCounters> counters = h.emu().TakeCounters();
  EXPECT_EQ(counters.size(), 1u);
  return counters.empty() ? emu::KernelCounters{} : counters[0];
}

// head_dim 64 and 128 (64- and 32-key tiles), GQA 1/4/8 (64, 16 and 8 tokens per CTA),
// f16 and bf16, block sizes 16, 32 and 24; the ldmatrix reads never conflict.
TEST(KernelsEmu, FlashAttentionMatchesCpu) {
  std::vector<FlashCase> cases;
  for (int hd : {64, 128}) {
    for (int group : {1, 4, 8}) cases.push_back({hd, group, 16, ElemType::kF16});
    cases.push_back({hd, 4, 32, ElemType::kBF16});
  }
  cases.push_back({128, 8, 24, ElemType::kF16, /*kv_heads=*/1});
  for (const FlashCase& c : cases) {
    const emu::KernelCounters k = RunFlash(c, kFlashLens, kFlashRows);
    EXPECT_GT(k.tensor_flops, 0u);
    EXPECT_GT(k.shared_load.requests, 0u);
    EXPECT_EQ(k.shared_load.BankConflicts(), 0u);
  }
}

// A group that does not divide the CTA's 64 rows (3 heads: 21 tokens, one row idle per
// warp pair) and a single long chunk spanning several CTAs after a prefix.
TEST(KernelsEmu, FlashAttentionOddGroupsAndLongChunks) {
  RunFlash({64, 3, 16, ElemType::kF16}, kFlashLens, kFlashRows);
  RunFlash({128, 1, 16, ElemType::kF16, /*kv_heads=*/1}, {333}, {200});
}

// The output in the model's f16/bf16 (the o projection's input): only the store rounds.
TEST(KernelsEmu, FlashAttentionWritesHalfOutputs) {
  RunFlash({64, 4, 16, ElemType::kF16, 2, ElemType::kF16}, kFlashLens, kFlashRows);
  RunFlash({128, 1, 32, ElemType::kBF16, 2, ElemType::kBF16}, kFlashLens, kFlashRows);
}

}  // namespace
}  // namespace ptxserve::kernels::testing
