// Every generated kernel of the config matrix assembles with NVIDIA's ptxas for
// sm_80 and sm_90, and the attention, quantized GEMV and fused decode kernels do not spill.
// Without ptxas the suite skips (with the reason), unless CI=true: then it fails.
#include <cstdio>

#include "gtest/gtest.h"
#include "kernels/decode_attention.h"
#include "kernels/embedding.h"
#include "kernels/flash_attention.h"
#include "kernels/gemm.h"
#include "kernels/gemm_quant.h"
#include "kernels/rope_kv.h"
#include "tests/kernels/kernel_matrix.h"
#include "tests/kernels/ptxas_util.h"

namespace ptxserve::kernels::testing {
namespace {

class PtxasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ptxas_ = FindPtxas();
    if (ptxas_.empty()) {
      if (InCi()) {
        FAIL() << "CI=true but ptxas is neither on PATH nor at /usr/local/cuda/bin/ptxas";
      }
      GTEST_SKIP() << "ptxas not found (PATH, /usr/local/cuda/bin): PTX not assembled";
    }
  }
  std::string ptxas_;
};

void ExpectAssembles(const std::string& ptxas, const ptx::Target& target, bool full) {
  const std::vector<PtxModule> modules = MatrixModules(target, full);
  std::vector<PtxModule> good;
  for (const PtxModule& m : modules) {
    EXPECT_FALSE(m.ptx.empty()) << m.label;
    if (!m.ptx.empty()) good.push_back(m);
  }
  const PtxasResult r = AssembleAll(ptxas, good, target.SmName());
  EXPECT_TRUE(r.ok) << r.log;
  EXPECT_GE(good.size(), full ? 50u : 5u);
}

// Every module assembles for sm_`sm`, each entry with registers and without spills (the
// register counts are printed: the figures the README quotes).
void ExpectNoSpills(const std::string& ptxas, const std::vector<PtxModule>& modules, int sm) {
  const PtxasResult r = AssembleAll(ptxas, modules, "sm_" + std::to_string(sm));
  ASSERT_TRUE(r.ok) << r.log;
  ASSERT_EQ(r.entries.size(), modules.size());
  for (const PtxasEntryInfo& e : r.entries) {
    std::printf("%-70s registers %3d spill stores %d loads %d\n", e.label.c_str(), e.registers,
                e.spill_stores, e.spill_loads);
    EXPECT_EQ(e.spill_stores, 0) << e.label;
    EXPECT_EQ(e.spill_loads, 0) << e.label;
    EXPECT_GT(e.registers, 0) << e.label;
  }
}

TEST_F(PtxasTest, MatrixAssemblesForSm80) { ExpectAssembles(ptxas_, ptx::Target{80, 78}, true); }
TEST_F(PtxasTest, MatrixAssemblesForSm90) { ExpectAssembles(ptxas_, ptx::Target{90, 78}, true); }
// The oldest ISA sm_80 has: nothing newer may slip into the sm_80 kernels.
TEST_F(PtxasTest, MatrixAssemblesWithPtx70) { ExpectAssembles(ptxas_, ptx::Target{80, 70}, false); }

TEST_F(PtxasTest, AttentionHeadDim128DoesNotSpill) {
  for (int sm : {80, 90}) {
    std::vector<PtxModule> modules;
    for (int group : {1, 4, 8}) {
      for (ElemType dt : {ElemType::kF32, ElemType::kF16, ElemType::kBF16}) {
        for (bool split : {false, true}) {
          DecodeAttentionConfig c;
          c.num_kv_heads = 8;
          c.num_heads = 8 * group;
          c.head_dim = 128;
          c.kv_dtype = dt;
          c.split = split;
          c.target = ptx::Target{sm, 78};
          absl::StatusOr<std::string> ptx = GenerateDecodeAttention(c);
          ASSERT_TRUE(ptx.ok()) << ptx.status();
          modules.push_back({c.Key(), *ptx});
          if (split || dt == ElemType::kF32) continue;
          c.out_dtype = dt;  // the model's activations: the store rounds
          ptx = GenerateDecodeAttention(c);
          ASSERT_TRUE(ptx.ok()) << ptx.status();
          modules.push_back({c.Key(), *ptx});
        }
      }
    }
    ExpectNoSpills(ptxas_, modules, sm);
  }
}

// Flash attention keeps a warp's q fragments and its 16 x head_dim f32 output tile in
// registers: none may spill at head_dim 64 or 128, for any group, f16 or bf16.
TEST_F(PtxasTest, FlashAttentionDoesNotSpill) {
  for (int sm : {80, 90}) {
    std::vector<PtxModule> modules;
    for (int hd : {64, 128}) {
      for (int group : {1, 4, 8}) {
        for (ElemType dt : {ElemType::kF16, ElemType::kBF16}) {
          FlashAttentionConfig c;
          c.num_kv_heads = 8;
          c.num_heads = 8 * group;
          c.head_dim = hd;
          c.kv_dtype = dt;
          c.target = ptx::Target{sm, 78};
          for (ElemType out : {ElemType::kF32, dt}) {
            c.out_dtype = out;
            absl::StatusOr<std::string> ptx = GenerateFlashAttention(c);
            ASSERT_TRUE(ptx.ok()) << ptx.status();
            modules.push_back({c.Key(), *ptx});
          }
        }
      }
    }
    ExpectNoSpills(ptxas_, modules, sm);
  }
}

// The quantized GEMV keeps its staged units and up to 8 rows of partial sums in registers,
// K split across warps or not, one column per warp or two; with the fused RMSNorm (up to 4
// rows), norm_w's unit and the rows' sums of squares too.
TEST_F(PtxasTest, QuantGemmDoesNotSpill) {
  for (int sm : {80, 90}) {
    std::vector<PtxModule> modules;
    for (BlockFormat f :
         {BlockFormat::kQ8_0, BlockFormat::kQ4_0, BlockFormat::kFp8E4M3, BlockFormat::kInt4G128}) {
      for (auto [m_tile, split, cols, norm] :
           {std::tuple{1, 1, 1, false}, std::tuple{8, 1, 1, false}, std::tuple{8, 4, 1, false},
            std::tuple{2, 1, 2, false}, std::tuple{1, 1, 1, true}, std::tuple{4, 1, 1, true},
            std::tuple{4, 4, 1, true}, std::tuple{2, 1, 2, true}}) {
        QuantGemmConfig c;
        c.n = 2048;
        c.k = 8192;
        c.format = f;
        c.m_tile = m_tile;
        c.split = split;
        c.cols = cols;
        c.norm = norm;
        c.accumulate = !norm;
        c.target = ptx::Target{sm, 78};
        absl::StatusOr<std::string> ptx = GenerateQuantGemm(c);
        ASSERT_TRUE(ptx.ok()) << ptx.status();
        modules.push_back({c.Key(), *ptx});
      }
    }
    ExpectNoSpills(ptxas_, modules, sm);
  }
}

// The quantized tensor-core form: a thread's decoded row (32 weights) beside a 64x64 warp
// part's 128 accumulators, in each format and tile, 2 to 4 stages.
TEST_F(PtxasTest, QuantGemmMmaDoesNotSpill) {
  for (int sm : {80, 90}) {
    std::vector<PtxModule> modules;
    for (BlockFormat f :
         {BlockFormat::kQ8_0, BlockFormat::kQ4_0, BlockFormat::kFp8E4M3, BlockFormat::kInt4G128}) {
      for (const GemmMmaTile& t :
           {GemmMmaTile{64, 64, 2, 2, 1, 2}, GemmMmaTile{64, 128, 2, 2, 1, 4},
            GemmMmaTile{128, 128, 2, 2, 1, 3}, GemmMmaTile{128, 256, 2, 4, 1, 3}}) {
        QuantGemmConfig c;
        c.n = 2048;
        c.k = 8192;
        c.format = f;
        c.accumulate = true;
        c.tensor_cores = true;
        c.tile_m = t.bm;
        c.tile_n = t.bn;
        c.warps_m = t.wm;
        c.warps_n = t.wn;
        c.stages = t.stages;
        c.target = ptx::Target{sm, 78};
        absl::StatusOr<std::string> ptx = GenerateQuantGemm(c);
        ASSERT_TRUE(ptx.ok()) << ptx.status();
        modules.push_back({c.Key(), *ptx});
      }
    }
    ExpectNoSpills(ptxas_, modules, sm);
  }
}

// The embedding gather decodes a whole block (32 values) per thread step in registers.
TEST_F(PtxasTest, EmbeddingBlocksDoNotSpill) {
  for (int sm : {80, 90}) {
    std::vector<PtxModule> modules;
    for (BlockFormat f : {BlockFormat::kQ8_0, BlockFormat::kQ4_0}) {
      EmbeddingConfig c;
      c.dim = 2048;
      c.blocks = true;
      c.block_format = f;
      c.target = ptx::Target{sm, 78};
      absl::StatusOr<std::string> ptx = GenerateEmbedding(c);
      ASSERT_TRUE(ptx.ok()) << ptx.status();
      modules.push_back({c.Key(), *ptx});
    }
    ExpectNoSpills(ptxas_, modules, sm);
  }
}

// The fused kernels of a decode layer: the GEMV with its input's RMSNorm (up to 8 rows of
// sums and of squares in registers) at Llama-3.2-1B's qkv and gate/up shapes, and rope_kv.
TEST_F(PtxasTest, FusedDecodeKernelsDoNotSpill) {
  for (int sm : {80, 90}) {
    std::vector<PtxModule> modules;
    for (ElemType t : {ElemType::kF32, ElemType::kF16, ElemType::kBF16}) {
      for (int n : {3072, 16384}) {
        for (int m_tile : {1, 8}) {
          GemmConfig g;
          g.n = n;
          g.k = 2048;
          g.weight_dtype = t;
          g.norm = true;
          g.m_tile = m_tile;
          g.target = ptx::Target{sm, 78};
          absl::StatusOr<std::string> ptx = GenerateGemm(g);
          ASSERT_TRUE(ptx.ok()) << ptx.status();
          modules.push_back({g.Key(), *ptx});
        }
      }
    }
    for (int hd : {64, 128}) {
      RopeKvConfig r;
      r.head_dim = hd;
      r.target = ptx::Target{sm, 78};
      absl::StatusOr<std::string> ptx = GenerateRopeKv(r);
      ASSERT_TRUE(ptx.ok()) << ptx.status();
      modules.push_back({r.Key(), *ptx});
    }
    ExpectNoSpills(ptxas_, modules, sm);
  }
}

}  // namespace
}  // namespace ptxserve::kernels::testing
