// The CPU backend over block-quantized weights against the same model with those
// weights dequantized to f32: bit for bit where the GEMMs widen the blocks, close where they
// round x to 8 bits (q4_0, q4_k, q6_k, and q8_0 in small batches).
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/gemm_tiles.h"
#include "engine/kv_block_manager.h"
#include "engine/model/quant.h"
#include "gtest/gtest.h"
#include "tests/cpu/test_model.h"

namespace ptxserve {
namespace {

using ::ptxserve::testing::ArgMax;
using ::ptxserve::testing::MakeBatch;
using ::ptxserve::testing::MakeRandomModel;
using ::ptxserve::testing::RandomModelSpec;
using ::ptxserve::testing::RelErr;
using ::ptxserve::testing::Seq;

// Rows of 256 and 512 elements: whole blocks of every format.
RandomModelSpec Spec(bool tied) {
  RandomModelSpec s;
  s.hidden = 256;
  s.intermediate = 512;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.tied = tied;
  s.attention_bias = true;
  return s;
}

// A model with its matrices in a block format, and the same model with them dequantized.
struct QuantizedPair {
  Model quantized, dequantized;
  size_t step_bytes = 0;  // quantized bytes of the linear weights and the LM head
};

// `t`'s rows in format q into `bytes`, and their dequantized values into `floats`.
void Encode(const Tensor& t, QuantType q, std::vector<uint8_t>* bytes, std::vector<float>* floats) {
  const int64_t rows = t.shape[0], K = t.shape[1], row_bytes = QuantRowBytes(q, K);
  bytes->resize(rows * row_bytes);
  floats->resize(rows * K);
  const auto* x = static_cast<const float*>(t.data);
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_TRUE(QuantizeRow(q, x + r * K, K, bytes->data() + r * row_bytes).ok());
    DequantizeRow(q, bytes->data() + r * row_bytes, K, floats->data() + r * K);
  }
}

// `mixed`: layer 0's wv stays plain f32 (its dequantized values), as Q4_K_M stores some
// attn_v in q6_k beside q4_k q/k: the backend keeps q/k in blocks and v in f32, two GEMMs,
// rather than widening the whole stack (step_bytes counts v's f32 bytes).
QuantizedPair Quantize(const Model& m, QuantType q, bool mixed) {
  QuantizedPair p{m, m};
  auto bytes = std::make_shared<std::vector<std::vector<uint8_t>>>();
  auto floats = std::make_shared<std::vector<std::vector<float>>>();
  bytes->reserve(64);
  floats->reserve(64);
  auto convert = [&](Tensor& qt, Tensor& ft, bool plain) {
    std::vector<uint8_t>& b = bytes->emplace_back();
    std::vector<float>& f = floats->emplace_back();
    Encode(qt, q, &b, &f);
    ft.data = f.data();
    ft.nbytes = f.size() * sizeof(float);
    if (plain) {
      qt = ft;
    } else {
      qt.quant = q;
      qt.data = b.data();
      qt.nbytes = b.size();
    }
    return plain ? f.size() * sizeof(float) : b.size();
  };
  ModelTensors& qm = p.quantized.tensors;
  ModelTensors& fm = p.dequantized.tensors;
  const bool tied = m.tensors.lm_head.data == m.tensors.embed.data;
  const size_t embed_bytes = convert(qm.embed, fm.embed, false);
  if (tied) {
    qm.lm_head = qm.embed;
    fm.lm_head = fm.embed;
    p.step_bytes += embed_bytes;
  } else {
    p.step_bytes += convert(qm.lm_head, fm.lm_head, false);
  }
  for (size_t i = 0; i < qm.layers.size(); ++i) {
    LayerTensors& ql = qm.layers[i];
    LayerTensors& fl = fm.layers[i];
    p.step_bytes += convert(ql.wq, fl.wq, false) + convert(ql.wk, fl.wk, false) +
                    convert(ql.wv, fl.wv, mixed && i == 0) + convert(ql.wo, fl.wo, false) +
                    convert(ql.w_gate, fl.w_gate, false) + convert(ql.w_up, fl.w_up, false) +
                    convert(ql.w_down, fl.w_down, false);
  }
  auto keep =
      std::make_shared<std::tuple<std::shared_ptr<const void>, decltype(bytes), decltype(floats)>>(
          m.storage, bytes, floats);
  p.quantized.storage = keep;
  p.dequantized.storage = keep;
  return p;
}

std::unique_ptr<CpuBackend> MakeBackend(const Model& m) {
  auto b = CpuBackend::Create(m, {64, 8, DType::kF32});
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

std::vector<int32_t> Prompt(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>((seed * 7919u + i * 104729u) % vocab);
  return p;
}

struct Case {
  QuantType quant;
  bool tied, mixed;
};

class CpuBackendQuantTest : public ::testing::TestWithParam<Case> {};

// Whether every GEMM of up to `rows` rows against `q` blocks widens them (exact).
bool Widens(QuantType q, int64_t rows) {
  for (int64_t m = 1; m <= rows; ++m) {
    if (cpu::ChooseBlockKernel(q, m) == cpu::BlockKernel::kInteger) return false;
  }
  return true;
}

// Bit for bit where the GEMMs widen the blocks. Where they round x to 8 bits (q8_0, q4_0, q4_k and
// q6_k in batches this small), each GEMM moves by up to amax/254 per x element (ops.h's
// bound, checked GEMM by GEMM in gemm_quant_test.cc); through two layers and the LM head
// the logits measured within 0.6% (the LM head alone) to 2% (every GEMM) of the largest.
void ExpectCloseLogits(const std::vector<float>& a, const std::vector<float>& b, bool exact,
                       int step) {
  if (exact) {
    EXPECT_EQ(a, b) << "step " << step;
  } else {
    ASSERT_EQ(a.size(), b.size());
    EXPECT_LT(RelErr(a.data(), b.data(), static_cast<int64_t>(a.size())), 5e-2) << "step " << step;
  }
}

// Two sequences: a batched prefill (every row's logits), then batched decode steps.
TEST_P(CpuBackendQuantTest, BatchedStepsGiveTheDequantizedModelsLogits) {
  const auto [q, tied, mixed] = GetParam();
  const Model base = MakeRandomModel(Spec(tied));
  const QuantizedPair p = Quantize(base, q, mixed);
  auto a = MakeBackend(p.quantized), b = MakeBackend(p.dequantized);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->step_weight_bytes(), p.step_bytes);
  EXPECT_LT(a->step_weight_bytes(), b->step_weight_bytes() * 3 / 10);
  const int64_t V = base.config.vocab_size;
  const bool exact = Widens(q, 17);
  KvBlockManager blocks_a(64, 8), blocks_b(64, 8);
  Seq s1{Prompt(11, V, 1), 0, {}}, s2{Prompt(6, V, 2), 0, {}}, t1 = s1, t2 = s2;
  std::vector<float> la, lb;
  ASSERT_TRUE(a->Step(MakeBatch({&s1, &s2}, {11, 6}, &blocks_a, true), &la).ok());
  ASSERT_TRUE(b->Step(MakeBatch({&t1, &t2}, {11, 6}, &blocks_b, true), &lb).ok());
  ExpectCloseLogits(la, lb, exact, 0);
  for (int step = 0; step < 3; ++step) {
    for (auto [s, t, row] : {std::tuple{&s1, &t1, 0}, std::tuple{&s2, &t2, 1}}) {
      const int32_t next = ArgMax(lb.data() + (step == 0 ? (row == 0 ? 10 : 16) : row) * V, V);
      s->tokens.push_back(next);
      t->tokens.push_back(next);
    }
    ASSERT_TRUE(a->Step(MakeBatch({&s1, &s2}, {1, 1}, &blocks_a, false), &la).ok());
    ASSERT_TRUE(b->Step(MakeBatch({&t1, &t2}, {1, 1}, &blocks_b, false), &lb).ok());
    ExpectCloseLogits(la, lb, exact, step + 1);
  }
}

// One sequence decoding: single-row GEMMs.
TEST_P(CpuBackendQuantTest, SingleRowDecodeGivesTheDequantizedModelsLogits) {
  const auto [q, tied, mixed] = GetParam();
  const Model base = MakeRandomModel(Spec(tied));
  const QuantizedPair p = Quantize(base, q, mixed);
  auto a = MakeBackend(p.quantized), b = MakeBackend(p.dequantized);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const int64_t V = base.config.vocab_size;
  const bool exact = Widens(q, 9);
  KvBlockManager blocks_a(64, 8), blocks_b(64, 8);
  Seq sa{Prompt(9, V, 3), 0, {}}, sb = sa;
  std::vector<float> la, lb;
  ASSERT_TRUE(a->Step(MakeBatch({&sa}, {9}, &blocks_a, false), &la).ok());
  ASSERT_TRUE(b->Step(MakeBatch({&sb}, {9}, &blocks_b, false), &lb).ok());
  for (int step = 0; step < 4; ++step) {
    ExpectCloseLogits(la, lb, exact, step);
    const int32_t next = ArgMax(lb.data(), V);
    sa.tokens.push_back(next);
    sb.tokens.push_back(next);
    ASSERT_TRUE(a->Step(MakeBatch({&sa}, {1}, &blocks_a, false), &la).ok());
    ASSERT_TRUE(b->Step(MakeBatch({&sb}, {1}, &blocks_b, false), &lb).ok());
  }
}

std::string CaseName(const Case& c) {
  return std::string(QuantName(c.quant)) + (c.tied ? "_tied" : "") + (c.mixed ? "_mixed" : "");
}
void PrintTo(const Case& c, std::ostream* os) { *os << CaseName(c); }

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (QuantType q : {QuantType::kQ8_0, QuantType::kQ4_0, QuantType::kQ4_K, QuantType::kQ6_K}) {
    cases.push_back({q, false, false});
    cases.push_back({q, true, false});
  }
  cases.push_back({QuantType::kQ4_K, false, true});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Formats, CpuBackendQuantTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return CaseName(info.param); });

}  // namespace
}  // namespace ptxserve
