// How the GPU backend runs the attention of a mixed step (a prefill chunk beside decode
// rows), by the cost model's h100 estimates at the Llama-3.2-1B attention shape (32 heads,
// 8 KV heads, head_dim 64, f16 cache): every figure printed is an ESTIMATE, not a
// measurement. Three ways are estimated over the emulator's counters (a sample of CTAs):
//  - flash for all rows: one flash_attention launch, each decode row a CTA of its own
//    (what the backend does, engine/cuda/gpu_step.cc);
//  - flash for the chunk, decode attention for the decode rows (split and merged as
//    PlanDecodeAttention plans them): two or three launches;
//  - the ragged decode kernel for every row (the path before flash attention).
// The backend's choice must stay within 1.35x of the cheapest of the three (as
// GemmConfigFor's picks are held in gemm_mma_test) up to 16 decode rows. Beyond that a
// separate decode-attention launch for the decode rows wins (about 1.9x at 64 rows since
// the decode kernel keeps a tile of K/V loads in flight); it needs the decode kernel to take
// a subset of the step's rows, not built yet. There flash for all rows must still beat the
// ragged kernel it replaced, so the choice is never a regression.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/attention_merge.h"
#include "kernels/cost/cost_model.h"
#include "kernels/decode_attention.h"
#include "kernels/flash_attention.h"
#include "tests/kernels/emu_harness.h"
#include "tests/kernels/ptxas_util.h"

namespace ptxserve::kernels::testing {
namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 64, kBlock = 16, kSms = 132;

// A step's metadata: one sequence per entry of `rows`, each with `context` tokens, its rows
// the last rows[s] positions; sequence s owns blocks [s * max_blocks, (s + 1) * max_blocks).
struct Step {
  std::vector<int32_t> query_start = {0}, positions, seq_lens, block_tables;
  int32_t max_blocks = 0;
  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
  int num_rows() const { return static_cast<int>(positions.size()); }
};
Step MakeStep(const std::vector<int32_t>& rows, int32_t context) {
  Step s;
  s.max_blocks = static_cast<int32_t>(CeilDiv(context, kBlock));
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int32_t r = 0; r < rows[i]; ++r) s.positions.push_back(context - rows[i] + r);
    s.query_start.push_back(s.query_start.back() + rows[i]);
    s.seq_lens.push_back(context);
    for (int32_t b = 0; b < s.max_blocks; ++b) {
      s.block_tables.push_back(static_cast<int32_t>(i) * s.max_blocks + b);
    }
  }
  return s;
}

// The estimated seconds of `ptx`'s launch on h100 (zero data, a sample of its CTAs).
double Estimate(const std::string& label, const std::string& ptx, const char* entry,
                const LaunchDims& dims, const std::vector<emu::KernelArg>& args, EmuHarness& h) {
  EXPECT_TRUE(h.Run(ptx, entry, dims, args).ok()) << label;
  std::vector<emu::KernelCounters> counters = h.emu().TakeCounters();
  EXPECT_EQ(counters.size(), 1u) << label;
  if (counters.size() != 1) return 0;
  int registers = 0;  // unknown without ptxas: the cost model assumes 32
  if (const std::string ptxas = FindPtxas(); !ptxas.empty()) {
    const PtxasResult a = AssembleAll(ptxas, {{label, ptx}}, "sm_90");
    if (a.ok && a.entries.size() == 1) registers = a.entries[0].registers;
  }
  return cost::EstimateLaunch(*cost::FindDevice("h100"), counters[0],
                              {.registers_per_thread = registers}, /*in_graph=*/false)
      .seconds;
}

// The emulator counting a sample of each launch's CTAs over zeroed memory.
emu::EmulatorOptions Sampling() {
  emu::EmulatorOptions o;
  o.poison_allocations = false;
  o.collect_counters = true;
  o.sample_ctas = 64;
  return o;
}

// Device buffers of a step over pools holding every block of its sequences.
struct Buffers {
  uint64_t q, k, v, tables, query_start, positions, seq_lens, out, partial, lse;
};
Buffers Upload(EmuHarness& h, const Step& s, int splits) {
  const size_t pool =
      static_cast<size_t>(s.num_seqs()) * s.max_blocks * kKvHeads * kBlock * kHeadDim * 2;
  const size_t act = static_cast<size_t>(s.num_rows()) * kHeads * kHeadDim * 4;
  return {h.Alloc(act),
          h.Alloc(pool),
          h.Alloc(pool),
          h.Upload(s.block_tables),
          h.Upload(s.query_start),
          h.Upload(s.positions),
          h.Upload(s.seq_lens),
          h.Alloc(act),
          h.Alloc(act * splits),
          h.Alloc(static_cast<size_t>(s.num_rows()) * kHeads * 4 * splits)};
}

double Flash(const Step& s) {
  FlashAttentionConfig cfg;
  cfg.num_heads = kHeads;
  cfg.num_kv_heads = kKvHeads;
  cfg.head_dim = kHeadDim;
  cfg.target = ptx::Target{90, 78};
  const absl::StatusOr<std::string> ptx = GenerateFlashAttention(cfg);
  EXPECT_TRUE(ptx.ok()) << ptx.status();
  EmuHarness h(Sampling());
  const Buffers b = Upload(h, s, 1);
  return Estimate(
      cfg.Key(), *ptx, kFlashAttentionEntry, FlashAttentionLaunch(cfg, s.num_rows(), s.num_seqs()),
      {Ptr(b.q), Ptr(b.k), Ptr(b.v), Ptr(b.tables), Ptr(b.query_start), Ptr(b.positions),
       Ptr(b.out), U32(s.max_blocks), U32(s.num_seqs()), U32(s.num_rows()), F32(0.125f)},
      h);
}

// decode_attention over the step (ragged when any sequence has several rows), split and
// merged as PlanDecodeAttention plans it on h100.
double DecodeKernel(const Step& s) {
  DecodeAttentionConfig cfg;
  cfg.num_heads = kHeads;
  cfg.num_kv_heads = kKvHeads;
  cfg.head_dim = kHeadDim;
  cfg.ragged = s.num_rows() != s.num_seqs();
  cfg.target = ptx::Target{90, 78};
  const AttentionPlan plan = PlanDecodeAttention(cfg, s.num_rows(), s.seq_lens[0], kSms);
  cfg.split = plan.split;
  const absl::StatusOr<std::string> ptx = GenerateDecodeAttention(cfg);
  const absl::StatusOr<DecodeAttentionShape> shape = ShapeOf(cfg);
  EXPECT_TRUE(ptx.ok() && shape.ok());
  EmuHarness h(Sampling());
  const Buffers b = Upload(h, s, plan.num_splits);
  double seconds = Estimate(
      cfg.Key(), *ptx, kDecodeAttentionEntry,
      DecodeAttentionLaunch(*shape, kKvHeads, s.num_rows(), plan.num_splits),
      {Ptr(b.q), Ptr(b.k), Ptr(b.v), Ptr(b.tables), Ptr(b.seq_lens), Ptr(b.query_start),
       Ptr(b.positions), Ptr(plan.split ? b.partial : b.out), Ptr(b.lse), U32(s.max_blocks),
       U32(s.num_seqs()), U32(s.num_rows()), F32(0.125f), U32(plan.partition_tokens)},
      h);
  if (plan.split) {
    AttentionMergeConfig mc;
    mc.num_heads = kHeads;
    mc.head_dim = kHeadDim;
    mc.target = cfg.target;
    const absl::StatusOr<std::string> mptx = GenerateAttentionMerge(mc);
    EXPECT_TRUE(mptx.ok());
    seconds += Estimate(
        mc.Key(), *mptx, kAttentionMergeEntry, AttentionMergeLaunch(mc, s.num_rows()),
        {Ptr(b.partial), Ptr(b.lse), Ptr(b.out), U32(plan.num_splits), U32(s.num_rows())}, h);
  }
  return seconds;
}

TEST(FlashAttentionEstimate, MixedStepsRunEveryRowInFlashUpToSixteenDecodeRows) {
  constexpr int kContext = 1024, kChunk = 512;
  for (int decodes : {1, 16, 64}) {
    std::vector<int32_t> rows = {kChunk};
    rows.insert(rows.end(), decodes, 1);
    const Step all = MakeStep(rows, kContext);
    const Step chunk = MakeStep({kChunk}, kContext);
    const Step decode_rows = MakeStep(std::vector<int32_t>(decodes, 1), kContext);
    const double flash_all = Flash(all);
    const double split = Flash(chunk) + DecodeKernel(decode_rows);
    const double ragged = DecodeKernel(all);
    absl::PrintF(
        "estimate (not measured): h100, a %d-row chunk after %d cached tokens + %d decode rows "
        "at context %d: flash for all rows %.1f us; flash for the chunk + decode attention "
        "%.1f us; ragged decode attention for all %.1f us\n",
        kChunk, kContext - kChunk, decodes, kContext, flash_all * 1e6, split * 1e6, ragged * 1e6);
    EXPECT_GT(flash_all, 0);
    EXPECT_LT(flash_all, ragged) << decodes << " decode rows";
    if (decodes <= 16) {
      EXPECT_LE(flash_all, 1.35 * std::min(split, ragged)) << decodes << " decode rows";
    }
  }
}

}  // namespace
}  // namespace ptxserve::kernels::testing
