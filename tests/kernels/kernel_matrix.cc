#include "tests/kernels/kernel_matrix.h"

#include <string>
#include <utility>

#include "kernels/kernel_list.h"
#include "tests/kernels/residual_add.h"

namespace ptxserve::kernels::testing {
namespace {

template <typename Config>
void Add(std::vector<MatrixKernel>* out, const Config& c,
         absl::StatusOr<std::string> (*generate)(const Config&) = &GeneratePtx<Config>) {
  absl::StatusOr<std::string> ptx = generate(c);
  if (ptx.ok()) {
    out->push_back({{c.Key(), *ptx}, GridDependent(c)});
  } else {
    out->push_back(
        {{"ERROR " + c.Key() + ": " + std::string(ptx.status().message()), ""}, GridDependent(c)});
  }
}

}  // namespace

std::vector<PtxModule> MatrixModules(const ptx::Target& target, bool full) {
  std::vector<PtxModule> out;
  for (MatrixKernel& k : MatrixKernels(target, full)) out.push_back(std::move(k.module));
  return out;
}

std::vector<MatrixKernel> MatrixKernels(const ptx::Target& target, bool full) {
  std::vector<MatrixKernel> out;
  const std::vector<ElemType> kv_types =
      full ? std::vector<ElemType>{ElemType::kF32, ElemType::kF16, ElemType::kBF16}
           : std::vector<ElemType>{ElemType::kF16};
  const std::vector<ElemType> attn_types =
      full ? std::vector<ElemType>{ElemType::kF32, ElemType::kF16}
           : std::vector<ElemType>{ElemType::kF16};
  const std::vector<int> head_dims = full ? std::vector<int>{64, 128} : std::vector<int>{128};
  const std::vector<int> block_sizes = full ? std::vector<int>{16, 32} : std::vector<int>{16};
  const std::vector<int> groups = full ? std::vector<int>{1, 4, 8} : std::vector<int>{4};
  for (int hd : head_dims) {
    for (int group : groups) {
      for (int bs : block_sizes) {
        for (ElemType dt : attn_types) {
          DecodeAttentionConfig c;
          c.num_kv_heads = 2;
          c.num_heads = 2 * group;
          c.head_dim = hd;
          c.block_size = bs;
          c.kv_dtype = dt;
          c.target = target;
          Add(&out, c);
          // The split and ragged variants once per shape, not per block size.
          if (bs == block_sizes[0]) {
            c.split = true;
            Add(&out, c);
            if (dt == attn_types.back()) {
              c.ragged = true;
              c.kv_dtype = ElemType::kBF16;
              Add(&out, c);
            }
          }
        }
      }
    }
    // Prefill attention on tensor cores: f16 per group, bf16 once per head_dim.
    for (int group : groups) {
      FlashAttentionConfig f;
      f.num_kv_heads = 2;
      f.num_heads = 2 * group;
      f.head_dim = hd;
      f.target = target;
      Add(&out, f);
      if (group == groups.back()) {
        f.kv_dtype = ElemType::kBF16;
        Add(&out, f);
      }
    }
  }
  // The rest of a decode step.
  for (ElemType dt : kv_types) {
    for (int dim : full ? std::vector<int>{100, 4096} : std::vector<int>{4096}) {
      EmbeddingConfig e;
      e.dim = dim;
      e.table_dtype = dt;
      e.target = target;
      Add(&out, e);
      if (dt == ElemType::kF32 && dim % 32 == 0) {  // a q8_0/q4_0 GGUF's table, as stored
        e.blocks = true;
        for (BlockFormat f : {BlockFormat::kQ8_0, BlockFormat::kQ4_0}) {
          e.block_format = f;
          Add(&out, e);
        }
      }
      RmsNormConfig r;
      r.dim = dim;
      r.weight_dtype = dt;
      r.target = target;
      Add(&out, r);
    }
    for (int m_tile : full ? std::vector<int>{1, 4, 8} : std::vector<int>{4}) {
      GemmConfig g;
      g.n = 4096;
      g.k = 4096;
      g.weight_dtype = dt;
      g.m_tile = m_tile;
      g.has_bias = m_tile == 4;
      g.accumulate = m_tile == 8;
      g.target = target;
      Add(&out, g);
      GemmConfig normed = g;  // the GEMV with its input's RMSNorm fused
      normed.norm = true;
      normed.accumulate = false;
      Add(&out, normed);
      if (m_tile == 4) {
        g.tiled = true;
        Add(&out, g);
      }
    }
  }
  for (BlockFormat f :
       {BlockFormat::kQ8_0, BlockFormat::kQ4_0, BlockFormat::kFp8E4M3, BlockFormat::kInt4G128}) {
    for (int m_tile : full ? std::vector<int>{1, 4, 8} : std::vector<int>{8}) {
      QuantGemmConfig q;  // Llama-3.2-1B's down projection (k 8192: two staging steps)
      q.n = 2048;
      q.k = 8192;
      q.format = f;
      q.m_tile = m_tile;
      q.has_bias = m_tile == 4;
      q.accumulate = m_tile != 4;
      q.target = target;
      Add(&out, q);
      if (m_tile <= 4) {
        QuantGemmConfig normed = q;  // the GEMV with its input's RMSNorm fused
        normed.norm = true;
        normed.accumulate = false;
        Add(&out, normed);
      }
    }
    QuantGemmConfig tc;  // the tensor-core form of the down projection, 128x128 tiles
    tc.n = 2048;
    tc.k = 8192;
    tc.format = f;
    tc.accumulate = true;
    tc.tensor_cores = true;
    tc.tile_m = tc.tile_n = 128;
    tc.stages = 3;
    tc.target = target;
    Add(&out, tc);
  }
  for (int hd : head_dims) {
    for (RopeLayout layout : {RopeLayout::kRotateHalf, RopeLayout::kInterleaved}) {
      for (ElemType dt : kv_types) {
        RopeKvConfig rk;
        rk.head_dim = hd;
        rk.layout = layout;
        rk.kv_dtype = dt;
        rk.target = target;
        Add(&out, rk);
      }
    }
  }
  for (int inter : {0, 11008}) {
    SiluMulConfig s;
    s.fused_inter = inter;
    s.target = target;
    Add(&out, s);
  }
  ResidualAddConfig ra;
  ra.target = target;
  Add(&out, ra, GenerateResidualAdd);
  ArgmaxConfig am;
  am.target = target;
  Add(&out, am);
  SamplingConfig sc;
  sc.target = target;
  Add(&out, sc);
  LogprobsConfig lp;
  lp.target = target;
  Add(&out, lp);
  PenaltiesConfig pen;
  pen.target = target;
  Add(&out, pen);
  if (!full) return out;
  sc.threads = 1024;
  Add(&out, sc);
  GemmConfig odd_gemm;  // K off the 128-bit grid, N not a multiple of the warps
  odd_gemm.n = 33;
  odd_gemm.k = 1001;
  odd_gemm.target = target;
  Add(&out, odd_gemm);
  odd_gemm.tiled = true;
  Add(&out, odd_gemm);
  GemmConfig tensor_core_gemm;  // partial 32x64 tiles in N, k a multiple of 8 only
  tensor_core_gemm.n = 100;
  tensor_core_gemm.k = 264;
  tensor_core_gemm.tiled = tensor_core_gemm.tensor_cores = true;
  tensor_core_gemm.SetMmaTile({32, 64, 2, 2, 1});
  tensor_core_gemm.target = target;
  Add(&out, tensor_core_gemm);
  // The prefill tiles at Llama-3.2-1B's down projection (residual fused) and its gate/up
  // projection with SwiGLU: 64x64 warp parts, 128 accumulators a thread.
  for (ElemType dt : {ElemType::kF16, ElemType::kBF16}) {
    GemmConfig down = tensor_core_gemm;
    down.n = 2048;
    down.k = 8192;
    down.weight_dtype = dt;
    down.accumulate = true;
    down.SetMmaTile(kMmaLargeTile);
    Add(&out, down);
    GemmConfig gate_up = down;
    gate_up.n = 8192;
    gate_up.k = 2048;
    gate_up.accumulate = false;
    gate_up.swiglu = true;
    gate_up.SetMmaTile({128, 256, 2, 4, 1, 3});
    Add(&out, gate_up);
    // Split-K (k over the grid's z, partial sums to a workspace) and its reduction, which
    // applies the residual or SwiGLU epilogue.
    for (GemmConfig split : {down, gate_up}) {
      split.split_k = 4;
      Add(&out, split);
      if (dt == ElemType::kF16) Add(&out, GemmReduceFor(split));  // f32 either way
    }
  }
  QuantGemmConfig odd_qgemm;  // one block per row (2-byte aligned rows), 3 columns a CTA
  odd_qgemm.n = 33;
  odd_qgemm.k = 32;
  odd_qgemm.warps = 3;
  odd_qgemm.target = target;
  Add(&out, odd_qgemm);
  am.threads = 256;
  Add(&out, am);
  lp.max_top = 0;
  Add(&out, lp);
  // Odd shapes: head_dim 32/96/160/256, non-power-of-two block size, wide groups.
  for (int hd : {32, 96, 160, 256}) {
    DecodeAttentionConfig c;
    c.num_kv_heads = 1;
    c.num_heads = 8;
    c.head_dim = hd;
    c.block_size = 24;
    c.kv_dtype = ElemType::kF16;
    c.target = target;
    Add(&out, c);
    if (hd <= 128) {  // flash attention's head_dim limit
      FlashAttentionConfig f;
      f.num_kv_heads = 1;
      f.num_heads = 3;  // a group that does not divide the CTA's 64 rows
      f.head_dim = hd;
      f.block_size = 24;
      f.target = target;
      Add(&out, f);
    }
    RopeKvConfig k;  // a non-power-of-two block size, an odd group
    k.num_heads = 9;
    k.num_kv_heads = 3;
    k.head_dim = hd;
    k.block_size = 24;
    k.target = target;
    Add(&out, k);
  }
  DecodeAttentionConfig wide;
  wide.num_kv_heads = 1;
  wide.num_heads = 32;
  wide.head_dim = 128;
  wide.kv_dtype = ElemType::kF32;
  wide.target = target;
  Add(&out, wide);
  return out;
}

}  // namespace ptxserve::kernels::testing
