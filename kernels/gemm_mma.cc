// Tensor-core form of the gemm kernel for f16 and bf16 weights (GenerateGemmMma): a
// 64x64 output tile per CTA of four warps, each warp a 32x32 quarter as 2 x 4 tiles of
// mma.sync m16n8k16 with f32 accumulators. K goes in steps of 32 through two stages of
// shared memory: the weights by cp.async (16-byte chunks, zero-filled past N and K), the
// f32 activations through registers, rounded to the weights' type on the way in (the one rounding
// this form adds: the tolerance of gemm_mma_test derives from it). Both tiles are read with
// ldmatrix from rows of 80 bytes (32 halves + 8 of padding), so the eight 16-byte rows of each 8x8
// matrix fall in distinct bank groups: no conflicts. Rows, columns and k past the matrix
// are zeros, so every warp reaches every barrier and every mma.
#include "absl/strings/str_cat.h"
#include "kernels/gemm.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {
namespace {

constexpr int kBM = 64, kBN = 64, kBK = 32, kThreads = 128;
constexpr int kRowBytes = (kBK + 8) * 2;  // a shared tile row: 32 halves and 8 of padding
constexpr int kTileBytes = 64 * kRowBytes;

}  // namespace

absl::StatusOr<std::string> GenerateGemmMma(const GemmConfig& cfg) {
  if (cfg.weight_dtype == ElemType::kF32 || cfg.k % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm config ", cfg.Key(),
                     ": the tensor-core form takes f16 or bf16 weights and k a multiple of 8"));
  }
  const Type half = cfg.weight_dtype == ElemType::kF16 ? Type::kF16 : Type::kBF16;
  const Type half2 = cfg.weight_dtype == ElemType::kF16 ? Type::kF16x2 : Type::kBF16x2;
  ptx::KernelBuilder kb(kGemmEntry, cfg.target);
  kb.SetMaxThreads(kThreads);
  const ParamRegs<GemmArgs> param =
      cfg.has_bias ? DeclareParams<GemmArgs>(kb) : DeclareParams<GemmArgs>(kb, {&GemmArgs::bias});
  const Reg x = param[&GemmArgs::x];
  const Reg w = param[&GemmArgs::w];
  const Reg bias = param[&GemmArgs::bias];
  const Reg y = param[&GemmArgs::y];
  const Reg m_rows = param[&GemmArgs::m];
  // Two stages of each tile, kTileBytes apart: [stage][m][k] and [stage][n][k] halves.
  const Reg a_tile = kb.AddressOf(kb.Shared("a", 2 * kTileBytes));
  const Reg b_tile = kb.AddressOf(kb.Shared("b", 2 * kTileBytes));

  const Reg tid = kb.Special(SReg::kTidX);
  const Reg lane = kb.Special(SReg::kLaneId);
  const Reg warp = kb.Emit(Op::kShr, Type::kU32, {tid, 5});
  const Reg n0 = kb.Emit(Op::kMulLo, Type::kU32, {kb.Special(SReg::kCtaidX), kBN});
  const Reg m0 = kb.Emit(Op::kMulLo, Type::kU32, {kb.Special(SReg::kCtaidY), kBM});

  // Loader roles. Activations: float4 f = tid + 128 i (i < 4) of the 64 x 32 tile, row
  // f / 8, k (f % 8) * 4. Weights: 16-byte chunk c = tid + 128 i (i < 2), row c / 4,
  // k (c % 4) * 8.
  struct Load {
    Reg src_row;  // global address of the row (row 0 when out of range)
    Reg row_ok;
    Reg k;    // k offset in the tile
    Reg dst;  // shared address
  };
  std::vector<Load> a_loads, b_loads;
  for (int i = 0; i < 4; ++i) {
    const Reg f = gen::UAdd(kb, tid, 128 * i);
    const Reg row = kb.Emit(Op::kShr, Type::kU32, {f, 3});
    const Reg k = kb.Emit(Op::kShl, Type::kB32, {kb.Emit(Op::kAnd, Type::kB32, {f, 7}), 2});
    const Reg grow = gen::UAdd(kb, m0, row);
    const Reg ok = kb.Setp(Cmp::kLt, Type::kU32, grow, m_rows);
    a_loads.push_back({gen::AddrAdd(kb, x, kb.Selp(Type::kU32, grow, 0, ok), int64_t{cfg.k} * 4),
                       ok, k,
                       kb.Emit(Op::kMadLo, Type::kU32,
                               {row, kRowBytes, kb.Emit(Op::kMadLo, Type::kU32, {k, 2, a_tile})})});
  }
  const int es = ElemSize(cfg.weight_dtype);
  for (int i = 0; i < 2; ++i) {
    const Reg c = gen::UAdd(kb, tid, 128 * i);
    const Reg row = kb.Emit(Op::kShr, Type::kU32, {c, 2});
    const Reg k = kb.Emit(Op::kShl, Type::kB32, {kb.Emit(Op::kAnd, Type::kB32, {c, 3}), 3});
    const Reg grow = gen::UAdd(kb, n0, row);
    const Reg ok = kb.Setp(Cmp::kLt, Type::kU32, grow, cfg.n);
    b_loads.push_back({gen::AddrAdd(kb, w, kb.Selp(Type::kU32, grow, 0, ok), int64_t{cfg.k} * es),
                       ok, k,
                       kb.Emit(Op::kMadLo, Type::kU32,
                               {row, kRowBytes, kb.Emit(Op::kMadLo, Type::kU32, {k, 2, b_tile})})});
  }

  // ldmatrix row addresses. Warp (wm, wn) = (warp / 2, warp % 2) owns rows 32 wm.. and
  // columns 32 wn... A (x4): lane l gives row l % 16 of the m16 tile at k 8 (l / 16), so the
  // four matrices are A's fragments a0..a3. B (x4): lane l gives column 8 (l / 16) + l % 8 at
  // k 8 ((l / 8) % 2): matrices 0, 1 are the b fragment of one n8 tile, 2, 3 of the next.
  const Reg wm = kb.Emit(Op::kShr, Type::kU32, {warp, 1});
  const Reg wn = kb.Emit(Op::kAnd, Type::kB32, {warp, 1});
  const Reg a_row =
      kb.Emit(Op::kMadLo, Type::kU32, {wm, 32, kb.Emit(Op::kAnd, Type::kB32, {lane, 15})});
  const Reg a_k = kb.Emit(Op::kShl, Type::kB32, {kb.Emit(Op::kShr, Type::kU32, {lane, 4}), 3});
  const Reg a_rd = kb.Emit(Op::kMadLo, Type::kU32,
                           {a_row, kRowBytes, kb.Emit(Op::kMadLo, Type::kU32, {a_k, 2, a_tile})});
  const Reg b_col = kb.Emit(Op::kMadLo, Type::kU32,
                            {wn, 32,
                             kb.Emit(Op::kMadLo, Type::kU32,
                                     {kb.Emit(Op::kShr, Type::kU32, {lane, 4}), 8,
                                      kb.Emit(Op::kAnd, Type::kB32, {lane, 7})})});
  const Reg b_k =
      kb.Emit(Op::kShl, Type::kB32,
              {kb.Emit(Op::kAnd, Type::kB32, {kb.Emit(Op::kShr, Type::kU32, {lane, 3}), 1}), 3});
  const Reg b_rd = kb.Emit(Op::kMadLo, Type::kU32,
                           {b_col, kRowBytes, kb.Emit(Op::kMadLo, Type::kU32, {b_k, 2, b_tile})});

  // acc[i][j]: the m16 tile i (rows 16 i) and n8 tile j (columns 8 j) of the warp's quarter.
  std::vector<std::vector<std::vector<Reg>>> acc(2, std::vector<std::vector<Reg>>(4));
  for (auto& row : acc) {
    for (auto& tile : row) {
      for (int e = 0; e < 4; ++e) tile.push_back(kb.Mov(Type::kF32, Operand::F32(0.0f)));
    }
  }

  // Two stages: while step s is multiplied from one pair of tiles, step s + 1's weights
  // are in flight into the other by cp.async and its activations into registers. One
  // barrier a step: after it, step s's tiles are complete, and every warp is done with
  // step s - 1's, which step s + 1's copies then overwrite.
  auto copy_weights = [&](Reg k0, Reg stage, Reg active) {
    for (const Load& l : b_loads) {
      const Reg k = gen::UAdd(kb, k0, l.k);
      const Reg ok =
          kb.Emit(Op::kAnd, Type::kPred, {l.row_ok, kb.Setp(Cmp::kLt, Type::kU32, k, cfg.k)});
      auto g = kb.If(active);
      kb.CpAsync(ptx::CpAsyncCache::kCg, Operand::Addr(gen::UAdd(kb, l.dst, stage)),
                 Operand::Addr(gen::AddrAdd(kb, l.src_row, kb.Selp(Type::kU32, k, 0, ok), es)), 16,
                 kb.Selp(Type::kU32, 16, 0, ok));
    }
    kb.CpAsyncCommit();
  };
  std::vector<std::vector<Reg>> a_regs(a_loads.size(), std::vector<Reg>(4));
  for (auto& v : a_regs) {
    for (Reg& r : v) r = kb.NewReg(Type::kF32);
  }
  auto load_activations = [&](Reg k0, Reg active) {
    for (size_t i = 0; i < a_loads.size(); ++i) {
      const Load& l = a_loads[i];
      const Reg k = gen::UAdd(kb, k0, l.k);
      const Reg ok = kb.Emit(
          Op::kAnd, Type::kPred,
          {active,
           kb.Emit(Op::kAnd, Type::kPred, {l.row_ok, kb.Setp(Cmp::kLt, Type::kU32, k, cfg.k)})});
      for (Reg r : a_regs[i]) kb.MovTo(r, Operand::F32(0.0f));
      auto g = kb.If(ok);
      kb.LdTo(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, l.src_row, k, 4)),
              a_regs[i]);
    }
  };

  const int64_t steps = CeilDiv(cfg.k, kBK);
  const Reg step = kb.Mov(Type::kU32, 0);
  const Reg k0 = kb.Mov(Type::kU32, 0);
  const Reg stage = kb.Mov(Type::kU32, 0);  // byte offset of this step's tiles
  const Reg all = kb.Setp(Cmp::kEq, Type::kU32, step, 0);
  copy_weights(k0, stage, all);
  load_activations(k0, all);
  const ptx::Label loop = kb.NewLabel("k_loop");
  kb.Bind(loop);
  {
    for (size_t i = 0; i < a_loads.size(); ++i) {
      const std::vector<Reg>& v = a_regs[i];
      kb.St(Space::kShared, Type::kB32, Operand::Addr(gen::UAdd(kb, a_loads[i].dst, stage)),
            {kb.CvtPack(half2, v[1], v[0]), kb.CvtPack(half2, v[3], v[2])});
    }
    kb.CpAsyncWait(0);
    kb.BarSync();
    const Reg next_stage = kb.Emit(Op::kXor, Type::kB32, {stage, kTileBytes});
    const Reg next_k0 = gen::UAdd(kb, k0, kBK);
    const Reg has_next = kb.Setp(Cmp::kLt, Type::kU32, next_k0, cfg.k);
    copy_weights(next_k0, next_stage, has_next);
    load_activations(next_k0, has_next);
    const Reg a_at = gen::UAdd(kb, a_rd, stage), b_at = gen::UAdd(kb, b_rd, stage);
    for (int kk = 0; kk < kBK / 16; ++kk) {
      std::vector<std::vector<Reg>> af(2), bf(4);
      for (int i = 0; i < 2; ++i) {
        af[i] = kb.Ldmatrix(4, false, Operand::Addr(a_at, int64_t{i} * 16 * kRowBytes + kk * 32));
      }
      for (int j = 0; j < 2; ++j) {
        const std::vector<Reg> r =
            kb.Ldmatrix(4, false, Operand::Addr(b_at, int64_t{j} * 16 * kRowBytes + kk * 32));
        bf[2 * j] = {r[0], r[1]};
        bf[2 * j + 1] = {r[2], r[3]};
      }
      for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 4; ++j) {
          kb.MmaTo(acc[i][j], ptx::MmaShape::kM16N8K16, half, af[i], bf[j], acc[i][j]);
        }
      }
    }
    kb.MovTo(stage, next_stage);
    kb.MovTo(k0, next_k0);
  }
  kb.EmitTo(step, Op::kAdd, Type::kU32, {step, 1});
  kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, step, steps), loop);

  // Epilogue: lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8, columns 2t and
  // 2t + 1 of each tile.
  const Reg g = kb.Emit(Op::kShr, Type::kU32, {lane, 2});
  const Reg t2 = kb.Emit(Op::kShl, Type::kB32, {kb.Emit(Op::kAnd, Type::kB32, {lane, 3}), 1});
  const Reg row0 = gen::UAdd(kb, m0, kb.Emit(Op::kMadLo, Type::kU32, {wm, 32, g}));
  const Reg col0 = gen::UAdd(kb, n0, kb.Emit(Op::kMadLo, Type::kU32, {wn, 32, t2}));
  for (int j = 0; j < 4; ++j) {
    for (int c = 0; c < 2; ++c) {
      const Reg col = gen::UAdd(kb, col0, 8 * j + c);
      const Reg col_ok = kb.Setp(Cmp::kLt, Type::kU32, col, cfg.n);
      Reg b;
      if (cfg.has_bias) {
        b = kb.Mov(Type::kF32, Operand::F32(0.0f));
        auto guard = kb.If(col_ok);
        kb.LdTo(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, bias, col, 4)), {b});
      }
      for (int i = 0; i < 2; ++i) {
        for (int h = 0; h < 2; ++h) {
          const Reg row = gen::UAdd(kb, row0, 16 * i + 8 * h);
          const Reg ok =
              kb.Emit(Op::kAnd, Type::kPred, {col_ok, kb.Setp(Cmp::kLt, Type::kU32, row, m_rows)});
          auto guard = kb.If(ok);
          const Reg ya = gen::AddrAdd(kb, gen::AddrAdd(kb, y, row, int64_t{cfg.n} * 4), col, 4);
          Reg v = acc[i][j][2 * h + c];
          if (cfg.has_bias) v = gen::FAdd(kb, v, b);
          if (cfg.accumulate) {
            v = gen::FAdd(kb, kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(ya)), v);
          }
          kb.St(Space::kGlobal, Type::kF32, Operand::Addr(ya), {v});
        }
      }
    }
  }
  kb.Ret();
  return kb.Finish({absl::StrCat("kernel ", kGemmEntry, ", config ", cfg.Key()),
                    "tensor cores: 64x64 CTA tile, 4 warps of 2x4 mma.m16n8k16, k step 32"});
}

}  // namespace ptxserve::kernels
