// Shared-memory tiled form of the gemm kernel (GemmConfig::tiled) for many token rows
// (prefill): a 64x64 output tile per CTA of 256 threads, each thread a 4x4 block, K in
// steps of 16 staged through shared memory as f32 (weights and f16/bf16 inputs converted on
// the way in), stored k-major so the inner loop reads 128-bit rows of both tiles.
// Out-of-range rows, columns and k are loaded as zeros, so every thread reaches every
// barrier.
#include "absl/strings/str_cat.h"
#include "kernels/gemm.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

constexpr int kBM = 64, kBN = 64, kBK = 16;

}  // namespace

namespace gen {

std::string GemmTiled(KernelBuilder& kb, const GemmConfig& cfg) {
  const int es = ElemSize(cfg.weight_dtype);
  const int xs = ElemSize(cfg.x_dtype);
  const auto [x, w, bias, y, m_rows] = DeclareGemmParams(kb, cfg);
  const ptx::Symbol as = kb.Shared("a", kBK * kBM * 4);  // [k][m]
  const ptx::Symbol bs = kb.Shared("b", kBK * kBN * 4);  // [k][n]

  const Reg tid = kb.Special(SReg::kTidX);
  const Reg n0 = kb.Emit(Op::kMulLo, Type::kU32, {kb.Special(SReg::kCtaidX), kBN});
  const Reg m0 = kb.Emit(Op::kMulLo, Type::kU32, {kb.Special(SReg::kCtaidY), kBM});
  const Reg tx = kb.Emit(Op::kAnd, Type::kB32, {tid, 15});  // output column group
  const Reg ty = kb.Emit(Op::kShr, Type::kU32, {tid, 4});   // output row group
  const Reg a_base = kb.AddressOf(as);
  const Reg b_base = kb.AddressOf(bs);

  // Loader role: row/column r = tid / 4 of the tile, k offset (tid % 4) * 4.
  const Reg lr = kb.Emit(Op::kShr, Type::kU32, {tid, 2});
  const Reg lk = kb.Emit(Op::kShl, Type::kB32, {kb.Emit(Op::kAnd, Type::kB32, {tid, 3}), 2});
  const Reg a_row = gen::UAdd(kb, m0, lr);
  const Reg b_row = gen::UAdd(kb, n0, lr);
  const Reg a_ok = kb.Setp(Cmp::kLt, Type::kU32, a_row, m_rows);
  const Reg b_ok = kb.Setp(Cmp::kLt, Type::kU32, b_row, cfg.n);
  const Reg a_src = gen::AddrAdd(kb, x, kb.Selp(Type::kU32, a_row, 0, a_ok), int64_t{cfg.k} * xs);
  const Reg b_src = gen::AddrAdd(kb, w, kb.Selp(Type::kU32, b_row, 0, b_ok), int64_t{cfg.k} * es);
  // Shared destinations [k][r]: column lr of rows lk .. lk + 3.
  const Reg a_dst = kb.Emit(Op::kMadLo, Type::kU32,
                            {lk, kBM * 4, kb.Emit(Op::kMadLo, Type::kU32, {lr, 4, a_base})});
  const Reg b_dst = kb.Emit(Op::kMadLo, Type::kU32,
                            {lk, kBN * 4, kb.Emit(Op::kMadLo, Type::kU32, {lr, 4, b_base})});
  const Reg a_rd = kb.Emit(Op::kMadLo, Type::kU32, {ty, 16, a_base});
  const Reg b_rd = kb.Emit(Op::kMadLo, Type::kU32, {tx, 16, b_base});

  std::vector<std::vector<Reg>> acc(4, std::vector<Reg>(4));
  for (auto& r : acc) {
    for (Reg& v : r) v = kb.Mov(Type::kF32, Operand::F32(0.0f));
  }
  const int64_t steps = CeilDiv(cfg.k, kBK);
  const Reg step = kb.Mov(Type::kU32, 0);
  const Reg k0 = kb.Mov(Type::kU32, 0);
  const ptx::Label loop = kb.NewLabel("k_loop");
  kb.Bind(loop);
  {
    // Stage: 4 consecutive k of one row of x and of w, zero outside the matrices.
    for (int t = 0; t < 2; ++t) {
      const bool is_a = t == 0;
      const Reg kk = gen::UAdd(kb, k0, lk);
      std::vector<Reg> v(4);
      for (Reg& r : v) r = kb.Mov(Type::kF32, Operand::F32(0.0f));
      const Reg src = is_a ? a_src : b_src;
      const int size = is_a ? xs : es;
      const ElemType et = is_a ? cfg.x_dtype : cfg.weight_dtype;
      const Reg row_ok = is_a ? a_ok : b_ok;
      if (cfg.k % 4 == 0) {
        // Whole 4-vectors: in range or not as a unit.
        const Reg ok =
            kb.Emit(Op::kAnd, Type::kPred, {row_ok, kb.Setp(Cmp::kLt, Type::kU32, kk, cfg.k)});
        auto g = kb.If(ok);
        gen::LoadAsF32To(kb, et, gen::AddrAdd(kb, src, kk, size), 0, v, 4 * size);
      } else {
        for (int e = 0; e < 4; ++e) {
          const Reg ke = gen::UAdd(kb, kk, e);
          const Reg ok =
              kb.Emit(Op::kAnd, Type::kPred, {row_ok, kb.Setp(Cmp::kLt, Type::kU32, ke, cfg.k)});
          auto g = kb.If(ok);
          gen::LoadAsF32To(kb, et, gen::AddrAdd(kb, src, ke, size), 0, {v[e]}, size);
        }
      }
      const Reg dst = is_a ? a_dst : b_dst;
      const int row_bytes = (is_a ? kBM : kBN) * 4;
      for (int e = 0; e < 4; ++e) {
        kb.St(Space::kShared, Type::kF32, Operand::Addr(dst, int64_t{e} * row_bytes), {v[e]});
      }
    }
    kb.BarSync();
    for (int kk = 0; kk < kBK; ++kk) {
      const std::vector<Reg> a =
          kb.Ld(Space::kShared, Type::kF32, Operand::Addr(a_rd, int64_t{kk} * kBM * 4), 4);
      const std::vector<Reg> b =
          kb.Ld(Space::kShared, Type::kF32, Operand::Addr(b_rd, int64_t{kk} * kBN * 4), 4);
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
          kb.EmitTo(acc[i][j], Op::kFma, Type::kF32, {a[i], b[j], acc[i][j]});
        }
      }
    }
    kb.BarSync();  // the next stage overwrites the tiles
  }
  kb.EmitTo(k0, Op::kAdd, Type::kU32, {k0, kBK});
  kb.EmitTo(step, Op::kAdd, Type::kU32, {step, 1});
  kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, step, steps), loop);

  // Epilogue: rows m0 + ty*4 + i, columns n0 + tx*4 + j.
  const Reg col0 = kb.Emit(Op::kMadLo, Type::kU32, {tx, 4, n0});
  const Reg row0 = kb.Emit(Op::kMadLo, Type::kU32, {ty, 4, m0});
  std::vector<Reg> bv(4);
  for (int j = 0; j < 4; ++j) {
    const Reg col = gen::UAdd(kb, col0, j);
    const Reg col_ok = kb.Setp(Cmp::kLt, Type::kU32, col, cfg.n);
    if (cfg.has_bias) {
      bv[j] = kb.Mov(Type::kF32, Operand::F32(0.0f));
      auto g = kb.If(col_ok);
      kb.LdTo(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, bias, col, 4)), {bv[j]});
    }
  }
  for (int i = 0; i < 4; ++i) {
    const Reg row = gen::UAdd(kb, row0, i);
    const Reg row_ok = kb.Setp(Cmp::kLt, Type::kU32, row, m_rows);
    const Reg yrow = gen::AddrAdd(kb, y, row, int64_t{cfg.n} * 4);
    for (int j = 0; j < 4; ++j) {
      const Reg col = gen::UAdd(kb, col0, j);
      const Reg ok =
          kb.Emit(Op::kAnd, Type::kPred, {row_ok, kb.Setp(Cmp::kLt, Type::kU32, col, cfg.n)});
      auto g = kb.If(ok);
      const Reg ya = gen::AddrAdd(kb, yrow, col, 4);
      Reg v = acc[i][j];
      if (cfg.has_bias) v = gen::FAdd(kb, v, bv[j]);
      if (cfg.accumulate) {
        v = gen::FAdd(kb, kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(ya)), v);
      }
      kb.St(Space::kGlobal, Type::kF32, Operand::Addr(ya), {v});
    }
  }
  kb.Ret();
  return "tiled: 64x64 CTA tile, 4x4 per thread, k step 16";
}

}  // namespace gen

}  // namespace ptxserve::kernels
