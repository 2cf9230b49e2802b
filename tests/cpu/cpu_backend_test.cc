// The CPU backend against the f64 reference model and against itself under different
// batchings, block layouts and KV dtypes; plus StepBatch validation.
#include "engine/cpu/cpu_backend.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

#include "engine/cpu/isa.h"
#include "engine/kv_sizing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cpu/test_model.h"
#include "tests/reference/reference_model.h"

namespace ptxserve {
namespace {

using ::ptxserve::testing::ArgMax;
using ::ptxserve::testing::MakeBatch;
using ::ptxserve::testing::MakeRandomModel;
using ::ptxserve::testing::RandomModelSpec;
using ::ptxserve::testing::RelErr;
using ::ptxserve::testing::Seq;
using ::testing::HasSubstr;

std::unique_ptr<CpuBackend> MakeBackend(const Model& m, KvCacheConfig kv = {64, 8, DType::kF32}) {
  auto b = CpuBackend::Create(m, kv);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

std::vector<int32_t> Prompt(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>((seed * 7919u + i * 104729u) % vocab);
  return p;
}

RandomModelSpec Spec(DType dtype, int64_t heads, int64_t kv_heads, int64_t hd, bool bias,
                     RopeStyle style, bool tied) {
  RandomModelSpec s;
  s.dtype = dtype;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = hd;
  s.attention_bias = bias;
  s.rope_style = style;
  s.tied = tied;
  return s;
}

std::vector<RandomModelSpec> ReferenceSpecs() {
  std::vector<RandomModelSpec> v;
  v.push_back(Spec(DType::kF32, 4, 4, 32, false, RopeStyle::kRotateHalf, false));
  v.push_back(Spec(DType::kF16, 4, 2, 64, true, RopeStyle::kInterleaved, true));
  v.push_back(Spec(DType::kF32, 8, 2, 32, true, RopeStyle::kRotateHalf, false));
  v.back().rope_scaling.type = RopeScaling::Type::kLlama3;
  v.back().rope_scaling.factor = 8;
  v.back().rope_scaling.original_max_position_embeddings = 16;  // all three bands in play
  v.push_back(Spec(DType::kF16, 4, 1, 64, false, RopeStyle::kRotateHalf, true));
  v.back().rope_scaling.type = RopeScaling::Type::kLinear;
  v.back().rope_scaling.factor = 2;
  v.push_back(Spec(DType::kBF16, 4, 2, 32, true, RopeStyle::kInterleaved, false));
  return v;
}

// A prompt of `tokens` tokens in one prefill: every row's logits within 1e-4 of the f64
// model, with f32 GEMM sums (a bf16 model's prefill GEMMs pinned below Isa::kAvx512Bf16,
// whose dot products round x to bf16). With them, where the CPU has them, within 3e-2: x
// rounded to bf16 at every GEMM, 2^-8 relative each, as HalfPrecisionKvCacheIsCloseToF32
// allows a bf16 cache.
void ExpectPrefillMatchesReference(const RandomModelSpec& spec, int64_t tokens = 21) {
  const Model model = MakeRandomModel(spec);
  auto ref = reference::ReferenceModel::Create(model);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::vector<int32_t> prompt = Prompt(tokens, model.config.vocab_size, 3);
  const auto want = ref->Forward(prompt);
  const int64_t V = model.config.vocab_size;
  const bool bf16_dot = spec.dtype == DType::kBF16 && cpu::DetectIsa() >= cpu::Isa::kAvx512Bf16;
  for (bool pinned : {true, false}) {
    if (!pinned && !bf16_dot) continue;
    SCOPED_TRACE(pinned ? "f32 sums" : "bf16 dot products");
    if (pinned && bf16_dot) {
      ASSERT_TRUE(cpu::SetGemmIsa(cpu::Isa::kAvx512Vnni));
    }
    auto backend = MakeBackend(model);
    ASSERT_NE(backend, nullptr);
    KvBlockManager blocks(64, 8);
    Seq s{prompt, 0, {}};
    std::vector<float> logits;
    const bool ok = backend->Step(MakeBatch({&s}, {tokens}, &blocks, true), &logits).ok();
    ASSERT_TRUE(cpu::SetGemmIsa(cpu::DetectIsa()));
    ASSERT_TRUE(ok);
    ASSERT_EQ(logits.size(), static_cast<size_t>(tokens * V));
    for (int64_t t = 0; t < tokens; ++t) {
      EXPECT_LT(RelErr(logits.data() + t * V, want[t].data(), V), pinned ? 1e-4 : 3e-2)
          << "row " << t;
    }
  }
}

class CpuBackendReferenceTest : public ::testing::TestWithParam<RandomModelSpec> {};

TEST_P(CpuBackendReferenceTest, PrefillMatchesReferenceModel) {
  ExpectPrefillMatchesReference(GetParam());
}

// 64 rows of 1024 hidden, 1024 intermediate and 512 + 2 x 256 q/k/v values: enough for
// embed, RMSNorm, RoPE with the KV write and SiLU to split their rows over the thread pool
// (kParallelRowElements in cpu_backend.cc), where the specs above run them on the calling
// thread.
TEST(CpuBackendTest, WidePrefillSplitsRowOpsOverThePoolAndMatchesReferenceModel) {
  RandomModelSpec spec = ReferenceSpecs()[0];
  spec.hidden = 1024;
  spec.intermediate = 1024;
  spec.heads = 16;
  spec.kv_heads = 8;
  spec.head_dim = 32;
  ExpectPrefillMatchesReference(spec, 64);
}

INSTANTIATE_TEST_SUITE_P(Models, CpuBackendReferenceTest, ::testing::ValuesIn(ReferenceSpecs()),
                         [](const auto& info) { return info.param.Name(); });

// Prefill 7 tokens, then decode 12 one at a time (greedy): each step's logits equal
// those of a fresh backend that recomputes the whole sequence in one prefill.
TEST(CpuBackendTest, IncrementalDecodeEqualsFullRecompute) {
  const Model model = MakeRandomModel(ReferenceSpecs()[1]);
  const int64_t V = model.config.vocab_size;
  auto inc = MakeBackend(model);
  KvBlockManager blocks(64, 8);
  Seq s{Prompt(7, V, 5), 0, {}};
  std::vector<std::vector<float>> steps;
  std::vector<float> logits;
  ASSERT_TRUE(inc->Step(MakeBatch({&s}, {7}, &blocks, false), &logits).ok());
  steps.push_back(logits);
  for (int i = 0; i < 12; ++i) {
    s.tokens.push_back(ArgMax(logits.data(), V));
    ASSERT_TRUE(inc->Step(MakeBatch({&s}, {1}, &blocks, false), &logits).ok());
    steps.push_back(logits);
  }
  auto full = MakeBackend(model);
  KvBlockManager blocks2(64, 8);
  Seq f{s.tokens, 0, {}};
  ASSERT_TRUE(full->Step(MakeBatch({&f}, {19}, &blocks2, true), &logits).ok());
  for (int i = 0; i < 13; ++i) {
    EXPECT_LT(RelErr(steps[i].data(), logits.data() + (6 + i) * V, V), 1e-5) << "step " << i;
  }
}

// Four sequences with different prompt lengths share steps that mix prefill chunks and
// decodes; each must see the same logits and greedy tokens as when run alone.
TEST(CpuBackendTest, BatchedSequencesMatchRunningAlone) {
  const Model model = MakeRandomModel(ReferenceSpecs()[2]);
  const int64_t V = model.config.vocab_size;
  const std::vector<int64_t> prompt_lens = {5, 19, 1, 12};
  const int kGenerate = 6;

  // Batched: a fixed schedule of (sequence, rows) per step; a sequence generates a
  // token from its logits once its prompt is complete.
  auto batched = MakeBackend(model);
  KvBlockManager blocks(64, 8);
  std::vector<Seq> seqs(4);
  for (int i = 0; i < 4; ++i) seqs[i].tokens = Prompt(prompt_lens[i], V, 10 + i);
  std::vector<std::vector<std::vector<float>>> got(4);  // per sequence, per generated token
  const std::vector<std::vector<std::pair<int, int64_t>>> schedule = {
      {{0, 5}, {1, 8}},
      {{0, 1}, {1, 11}, {2, 1}},
      {{3, 12}, {0, 1}, {1, 1}, {2, 1}},
  };
  auto run = [&](const std::vector<std::pair<int, int64_t>>& step) {
    std::vector<Seq*> ptrs;
    std::vector<int64_t> counts;
    for (auto [i, n] : step) {
      ptrs.push_back(&seqs[i]);
      counts.push_back(n);
    }
    std::vector<float> logits;
    ASSERT_TRUE(batched->Step(MakeBatch(ptrs, counts, &blocks, false), &logits).ok());
    for (size_t r = 0; r < step.size(); ++r) {
      Seq& s = *ptrs[r];
      if (s.cached < prompt_lens[step[r].first]) continue;  // mid-prompt chunk
      got[step[r].first].emplace_back(logits.begin() + r * V, logits.begin() + (r + 1) * V);
      s.tokens.push_back(ArgMax(logits.data() + r * V, V));
    }
  };
  for (const auto& step : schedule) run(step);
  while (true) {
    std::vector<std::pair<int, int64_t>> step;
    for (int i = 0; i < 4; ++i) {
      if (static_cast<int>(got[i].size()) < kGenerate) step.push_back({i, 1});
    }
    if (step.empty()) break;
    run(step);
  }

  for (int i = 0; i < 4; ++i) {
    auto alone = MakeBackend(model);
    KvBlockManager own(64, 8);
    Seq s{Prompt(prompt_lens[i], V, 10 + i), 0, {}};
    std::vector<float> logits;
    ASSERT_TRUE(alone->Step(MakeBatch({&s}, {prompt_lens[i]}, &own, false), &logits).ok());
    for (int g = 0; g < kGenerate; ++g) {
      EXPECT_LT(RelErr(got[i][g].data(), logits.data(), V), 1e-5) << "seq " << i << " token " << g;
      s.tokens.push_back(ArgMax(logits.data(), V));
      if (g + 1 < kGenerate) {
        ASSERT_TRUE(alone->Step(MakeBatch({&s}, {1}, &own, false), &logits).ok());
      }
    }
    EXPECT_EQ(s.tokens, seqs[i].tokens) << "sequence " << i;
  }
}

// Runs `tokens` as a prefill of 13 then single-token decodes through the given block
// table (block size 4) and returns all logits, concatenated.
std::vector<float> RunWithTable(CpuBackend* backend, const std::vector<int32_t>& tokens,
                                const std::vector<int32_t>& table) {
  std::vector<float> all, logits;
  const int bs = 4;
  int64_t done = 0;
  while (done < static_cast<int64_t>(tokens.size())) {
    const int64_t n = done == 0 ? 13 : 1;
    StepBatch b;
    for (int64_t p = done; p < done + n; ++p) {
      b.token_ids.push_back(tokens[p]);
      b.positions.push_back(static_cast<int32_t>(p));
      b.slot_mapping.push_back(int64_t{table[p / bs]} * bs + p % bs);
    }
    done += n;
    b.query_start = {0, static_cast<int32_t>(n)};
    b.seq_lens = {static_cast<int32_t>(done)};
    b.block_tables = table;
    b.max_blocks_per_seq = static_cast<int32_t>(table.size());
    b.logits_rows = {static_cast<int32_t>(n - 1)};
    EXPECT_TRUE(backend->Step(b, &logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

TEST(CpuBackendTest, ScrambledBlocksGiveSameResultAsContiguous) {
  const Model model = MakeRandomModel(ReferenceSpecs()[3]);
  const std::vector<int32_t> tokens = Prompt(30, model.config.vocab_size, 21);
  std::vector<int32_t> contiguous(8);
  std::iota(contiguous.begin(), contiguous.end(), 0);
  const std::vector<int32_t> scrambled = {13, 2, 7, 30, 0, 21, 5, 9};
  auto a = MakeBackend(model, {32, 4, DType::kF32});
  auto b = MakeBackend(model, {32, 4, DType::kF32});
  const std::vector<float> la = RunWithTable(a.get(), tokens, contiguous);
  const std::vector<float> lb = RunWithTable(b.get(), tokens, scrambled);
  ASSERT_EQ(la.size(), 18u * model.config.vocab_size);
  EXPECT_EQ(la, lb);  // same arithmetic in the same order: bit-identical
}

TEST(CpuBackendTest, HalfPrecisionKvCacheIsCloseToF32) {
  const Model model = MakeRandomModel(ReferenceSpecs()[0]);
  const std::vector<int32_t> tokens = Prompt(24, model.config.vocab_size, 8);
  std::vector<int32_t> table(8);
  std::iota(table.begin(), table.end(), 0);
  auto f32 = MakeBackend(model, {32, 4, DType::kF32});
  const std::vector<float> want = RunWithTable(f32.get(), tokens, table);
  for (auto [dtype, tol] : {std::pair{DType::kF16, 3e-3}, std::pair{DType::kBF16, 3e-2}}) {
    auto half = MakeBackend(model, {32, 4, dtype});
    const std::vector<float> got = RunWithTable(half.get(), tokens, table);
    ASSERT_EQ(got.size(), want.size());
    const double err = RelErr(got.data(), want.data(), got.size());
    EXPECT_LT(err, tol) << DTypeName(dtype);
    EXPECT_GT(err, 0.0) << DTypeName(dtype) << " cache behaves exactly like f32";
  }
}

TEST(CpuBackendTest, InvalidStepBatchIsRejectedNamingTheField) {
  const Model model = MakeRandomModel(ReferenceSpecs()[0]);
  auto backend = MakeBackend(model, {16, 4, DType::kF32});
  KvBlockManager blocks(16, 4);
  Seq a{Prompt(6, model.config.vocab_size, 1), 0, {}};
  Seq b{Prompt(3, model.config.vocab_size, 2), 0, {}};
  const StepBatch good = MakeBatch({&a, &b}, {6, 3}, &blocks, false);
  struct Case {
    const char* field;
    std::function<void(StepBatch&)> mutate;
  };
  const std::vector<Case> cases = {
      {"token_ids is empty", [](StepBatch& s) { s = StepBatch(); }},
      {"token_ids[1]", [&](StepBatch& s) { s.token_ids[1] = model.config.vocab_size; }},
      {"token_ids[0]", [](StepBatch& s) { s.token_ids[0] = -1; }},
      {"positions has", [](StepBatch& s) { s.positions.pop_back(); }},
      {"positions[7]", [](StepBatch& s) { s.positions[7] = 3; }},
      {"positions[0]", [](StepBatch& s) { s.positions[0] = -1; }},
      {"slot_mapping has", [](StepBatch& s) { s.slot_mapping.push_back(0); }},
      {"slot_mapping[2]", [](StepBatch& s) { s.slot_mapping[2] += 1; }},
      {"query_start has", [](StepBatch& s) { s.query_start.pop_back(); }},
      {"query_start[0]", [](StepBatch& s) { s.query_start[0] = 1; }},
      {"query_start[2]", [](StepBatch& s) { s.query_start[2] = 8; }},
      {"query_start[1]", [](StepBatch& s) { s.query_start[1] = 10; }},
      {"seq_lens[0]", [](StepBatch& s) { s.seq_lens[0] = 1000; }},
      {"seq_lens[1]", [](StepBatch& s) { s.seq_lens[1] = 2; }},
      {"block_tables[1]", [](StepBatch& s) { s.block_tables[1] = 16; }},
      {"block_tables has", [](StepBatch& s) { s.block_tables.pop_back(); }},
      {"max_blocks_per_seq", [](StepBatch& s) { s.max_blocks_per_seq = 0; }},
      {"logits_rows[1]", [](StepBatch& s) { s.logits_rows[1] = 9; }},
      {"seq_lens is empty", [](StepBatch& s) { s.seq_lens.clear(); }},
  };
  std::vector<float> logits;
  for (const Case& c : cases) {
    StepBatch bad = good;
    c.mutate(bad);
    const absl::Status st = backend->Step(bad, &logits);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.field << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(c.field));
  }
  ASSERT_TRUE(backend->Step(good, &logits).ok());
  EXPECT_EQ(logits.size(), 2u * model.config.vocab_size);
}

TEST(CpuBackendTest, CreateRejectsBadModelsAndKvConfigs) {
  RandomModelSpec spec;
  {
    Model m = MakeRandomModel(spec);
    m.tensors.layers[1].wk.data = nullptr;
    const auto b = CreateCpuBackend(m, {});
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(b.status().message(), HasSubstr("model.layers.1.self_attn.k_proj.weight"));
  }
  {
    Model m = MakeRandomModel(spec);
    m.tensors.layers[0].w_down.shape = {spec.intermediate, spec.hidden};
    const auto b = CreateCpuBackend(m, {});
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(b.status().message(), HasSubstr("mlp.down_proj.weight has shape [96, 64]"));
  }
  {
    Model m = MakeRandomModel(spec);
    m.config.num_kv_heads = 3;
    EXPECT_EQ(CreateCpuBackend(m, {}).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    Model m = MakeRandomModel(spec);
    EXPECT_EQ(CreateCpuBackend(m, {16, 0, DType::kF32}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "block_size 0";
  }
  {
    // No blocks asked for: the host default, one full context at least.
    Model m = MakeRandomModel(spec);
    const KvCacheConfig unsized{0, 16, DType::kF32};
    const auto b = CreateCpuBackend(m, unsized);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->kv_config().num_blocks, DefaultHostKvBlocks(m.config, unsized, 1));
    EXPECT_GE(int64_t{(*b)->kv_config().num_blocks} * 16, m.config.max_position_embeddings);
  }
}

// `m` with every tensor converted to f32 (exact from f16 and bf16); a tied LM head stays
// the embedding's bytes.
Model Widened(const Model& m) {
  return testing::ConvertTensors(m, /*vectors_too=*/true, [](Tensor& t, std::vector<uint8_t>& b) {
    b.resize(static_cast<size_t>(t.numel()) * sizeof(float));
    ConvertToFloat(t.dtype, t.data, static_cast<size_t>(t.numel()),
                   reinterpret_cast<float*>(b.data()));
    t.dtype = DType::kF32;
  });
}

// f16 and bf16 matrices are held as stored (half the bytes of an f32 copy) and widened in
// the GEMM exactly, so a prefill and the decode steps after it give the f32 copy's logits
// bit for bit.
TEST(CpuBackendTest, HalfWeightsStayHalfAndGiveTheWidenedModelsLogits) {
  for (DType dt : {DType::kF16, DType::kBF16}) {
    for (bool tied : {false, true}) {
      SCOPED_TRACE(std::string(DTypeName(dt)) + (tied ? " tied" : ""));
      const Model half = MakeRandomModel(Spec(dt, 4, 2, 32, true, RopeStyle::kRotateHalf, tied));
      const Model wide = Widened(half);
      auto a = MakeBackend(half), b = MakeBackend(wide);
      ASSERT_NE(a, nullptr);
      ASSERT_NE(b, nullptr);
      EXPECT_EQ(2 * a->step_weight_bytes(), b->step_weight_bytes());
      EXPECT_LT(a->weight_bytes(), b->weight_bytes() * 6 / 10);
      const int64_t V = half.config.vocab_size;
      KvBlockManager blocks_a(64, 8), blocks_b(64, 8);
      Seq sa{Prompt(11, V, 9), 0, {}}, sb = sa;
      std::vector<float> la, lb;
      ASSERT_TRUE(a->Step(MakeBatch({&sa}, {11}, &blocks_a, true), &la).ok());
      ASSERT_TRUE(b->Step(MakeBatch({&sb}, {11}, &blocks_b, true), &lb).ok());
      EXPECT_EQ(la, lb);
      for (int i = 0; i < 4; ++i) {
        const int32_t next = ArgMax(la.data() + (la.size() / V - 1) * V, V);
        sa.tokens.push_back(next);
        sb.tokens.push_back(next);
        ASSERT_TRUE(a->Step(MakeBatch({&sa}, {1}, &blocks_a, false), &la).ok());
        ASSERT_TRUE(b->Step(MakeBatch({&sb}, {1}, &blocks_b, false), &lb).ok());
        EXPECT_EQ(la, lb) << "decode step " << i;
      }
    }
  }
}

TEST(CpuBackendTest, ReportsWeightBytes) {
  for (bool tied : {false, true}) {
    RandomModelSpec spec;
    spec.tied = tied;
    spec.attention_bias = true;
    const Model m = MakeRandomModel(spec);
    auto b = MakeBackend(m);
    const int64_t H = spec.hidden, I = spec.intermediate, V = spec.vocab;
    const int64_t QD = spec.heads * spec.head_dim, KD = spec.kv_heads * spec.head_dim;
    const int64_t linear = H * (QD + 2 * KD) + QD * H + 3 * H * I;
    const int64_t per_layer = linear + (QD + 2 * KD) + 2 * H;
    EXPECT_EQ(b->weight_bytes(), 4u * (V * H * (tied ? 1 : 2) + H + spec.layers * per_layer));
    EXPECT_EQ(b->step_weight_bytes(), 4u * (V * H + spec.layers * linear));
    EXPECT_EQ(b->name(), "cpu");
  }
}

}  // namespace
}  // namespace ptxserve
