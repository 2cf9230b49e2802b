// How the GPU backend runs the attention of a mixed step (a prefill chunk beside decode
// rows), by the cost model's h100 estimates at the Llama-3.2-1B attention shape (32 heads,
// 8 KV heads, head_dim 64, f16 cache): every figure printed is an ESTIMATE, not a
// measurement. Two ways are estimated over the emulator's counters (a sample of CTAs), for
// chunks of 256 to 2048 rows after 512 cached tokens beside 1 to 128 decode rows at context
// 1024:
//  - flash for all rows: one flash_attention launch, each decode row a CTA of its own;
//  - flash for the chunk, decode attention for the decode rows (split as PlanDecodeAttention
//    plans them, merged in the same launch): two launches.
// (The ragged decode kernel for every row, the path before flash attention, was 5-8x the
// cheaper of the two at 512 rows.) The backend (engine/cuda/gpu_step.cc) runs the decode rows
// apart where MixedDecodeRowsApart says: the test prints where the cost model's cheaper way
// changes beside each chunk and holds the backend's choice within 1.1x of the cheaper at every
// count (as GemmConfigFor's picks are held in gemm_mma_test).
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/cost/cost_model.h"
#include "kernels/decode_attention.h"
#include "kernels/flash_attention.h"
#include "tests/kernels/emu_harness.h"
#include "tests/kernels/ptxas_util.h"

namespace ptxserve::kernels::testing {
namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 64, kBlock = 16, kSms = 132;

// A step's metadata: one sequence per entry of `rows`, sequence s with contexts[s] tokens,
// its rows the last rows[s] positions; sequence s owns blocks [s * max_blocks, (s + 1) *
// max_blocks), max_blocks for the longest context.
struct Step {
  std::vector<int32_t> query_start = {0}, positions, seq_lens, block_tables;
  int32_t max_blocks = 0;
  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
  int num_rows() const { return static_cast<int>(positions.size()); }
};
Step MakeStep(const std::vector<int32_t>& rows, const std::vector<int32_t>& contexts) {
  Step s;
  s.max_blocks =
      static_cast<int32_t>(CeilDiv(*std::max_element(contexts.begin(), contexts.end()), kBlock));
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int32_t r = 0; r < rows[i]; ++r) s.positions.push_back(contexts[i] - rows[i] + r);
    s.query_start.push_back(s.query_start.back() + rows[i]);
    s.seq_lens.push_back(contexts[i]);
    for (int32_t b = 0; b < s.max_blocks; ++b) {
      s.block_tables.push_back(static_cast<int32_t>(i) * s.max_blocks + b);
    }
  }
  return s;
}

// Registers per thread of `ptx` from ptxas at sm_90, once per text; 0 without ptxas.
int Registers(const std::string& label, const std::string& ptx) {
  static std::map<std::string, int>& known = *new std::map<std::string, int>;
  if (auto it = known.find(ptx); it != known.end()) return it->second;
  int registers = 0;
  if (const std::string ptxas = FindPtxas(); !ptxas.empty()) {
    const PtxasResult a = AssembleAll(ptxas, {{label, ptx}}, "sm_90");
    if (a.ok && a.entries.size() == 1) registers = a.entries[0].registers;
  }
  known[ptx] = registers;
  return registers;
}

// The estimated seconds of `ptx`'s launch on h100 (zero data, a sample of its CTAs).
double Estimate(const std::string& label, const std::string& ptx, const char* entry,
                const LaunchDims& dims, const std::vector<emu::KernelArg>& args, EmuHarness& h) {
  EXPECT_TRUE(h.Run(ptx, entry, dims, args).ok()) << label;
  std::vector<emu::KernelCounters> counters = h.emu().TakeCounters();
  EXPECT_EQ(counters.size(), 1u) << label;
  if (counters.size() != 1) return 0;
  // Unknown without ptxas (0): the cost model assumes 32.
  return cost::EstimateLaunch(*cost::FindDevice("h100"), counters[0],
                              {.registers_per_thread = Registers(label, ptx)}, /*in_graph=*/false)
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
  uint64_t q, k, v, tables, query_start, positions, seq_lens, out, partial, lse, counts;
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
          h.Alloc(static_cast<size_t>(s.num_rows()) * kHeads * 4 * splits),
          h.Upload(std::vector<uint32_t>(static_cast<size_t>(s.num_rows()) * kHeads, 0))};
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

// decode_attention over the step (ragged when any sequence has several rows), split as
// PlanDecodeAttention plans it on h100.
double DecodeKernel(const Step& s) {
  DecodeAttentionConfig cfg;
  cfg.num_heads = kHeads;
  cfg.num_kv_heads = kKvHeads;
  cfg.head_dim = kHeadDim;
  cfg.ragged = s.num_rows() != s.num_seqs();
  cfg.target = ptx::Target{90, 78};
  const AttentionPlan plan = PlanDecodeAttention(
      cfg, s.num_rows(), *std::max_element(s.seq_lens.begin(), s.seq_lens.end()), kSms);
  cfg.split = plan.split;
  const absl::StatusOr<std::string> ptx = GenerateDecodeAttention(cfg);
  const absl::StatusOr<DecodeAttentionShape> shape = ShapeOf(cfg);
  EXPECT_TRUE(ptx.ok() && shape.ok());
  EmuHarness h(Sampling());
  const Buffers b = Upload(h, s, plan.num_splits);
  return Estimate(
      cfg.Key(), *ptx, kDecodeAttentionEntry,
      DecodeAttentionLaunch(*shape, kKvHeads, s.num_rows(), plan.num_splits),
      {Ptr(b.q), Ptr(b.k), Ptr(b.v), Ptr(b.tables), Ptr(b.seq_lens), Ptr(b.query_start),
       Ptr(b.positions), Ptr(b.out), Ptr(b.partial), Ptr(b.lse), Ptr(b.counts), U32(s.max_blocks),
       U32(s.num_seqs()), U32(s.num_rows()), F32(0.125f), U32(plan.partition_tokens)},
      h);
}

TEST(FlashAttentionEstimate, MixedStepsRunDecodeRowsApartFromTheCrossover) {
  // Decode rows at context 1024 beside a chunk after 512 cached tokens.
  constexpr int kContext = 1024, kCached = 512;
  std::map<int, double> decode_alone;  // decode attention for d decode rows, by d
  for (int chunk : {256, 512, 1024, 2048}) {
    const double chunk_alone = Flash(MakeStep({chunk}, {kCached + chunk}));
    int first_apart = 0;   // the fewest decode rows for which the separate launch is cheaper
    int first_chosen = 0;  // the fewest for which the backend runs them apart
    for (int decodes : {1, 4, 8, 12, 16, 20, 24, 32, 48, 64, 128}) {
      std::vector<int32_t> rows = {chunk}, contexts = {kCached + chunk};
      rows.insert(rows.end(), decodes, 1);
      contexts.insert(contexts.end(), decodes, kContext);
      if (!decode_alone.contains(decodes)) {
        decode_alone[decodes] = DecodeKernel(
            MakeStep(std::vector<int32_t>(decodes, 1), std::vector<int32_t>(decodes, kContext)));
      }
      const double flash_all = Flash(MakeStep(rows, contexts));
      const double apart = chunk_alone + decode_alone[decodes];
      absl::PrintF(
          "estimate (not measured): h100, a %d-row chunk after %d cached tokens + %d decode rows "
          "at context %d: flash for all rows %.1f us; flash for the chunk + decode attention "
          "%.1f us\n",
          chunk, kCached, decodes, kContext, flash_all * 1e6, apart * 1e6);
      EXPECT_GT(flash_all, 0);
      if (apart < flash_all && first_apart == 0) first_apart = decodes;
      const bool chosen_apart = MixedDecodeRowsApart(decodes, chunk);
      if (chosen_apart && first_chosen == 0) first_chosen = decodes;
      const double chosen = chosen_apart ? apart : flash_all;
      EXPECT_LE(chosen, 1.1 * std::min(flash_all, apart)) << chunk << " + " << decodes;
    }
    absl::PrintF(
        "estimate (not measured): beside a %d-row chunk the separate decode launch is cheaper "
        "from %d decode rows (of those tried); the backend runs them apart from %d\n",
        chunk, first_apart, first_chosen);
  }
}

}  // namespace
}  // namespace ptxserve::kernels::testing
