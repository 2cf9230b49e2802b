// Tensor-core form of the gemm kernel for f16 and bf16 weights (gen::GemmMma). A CTA of
// four warps computes a bm x bn output tile with mma.sync m16n8k16 and f32 accumulators;
// the warps are laid out wm x wn x wk (GemmConfig's tile fields): each owns a (bm / wm) x (bn / wn)
// part, and with wk > 1 a k slice of every step, the slices' sums added through shared
// memory at the end in warp order (so the result does not depend on timing).
//
// K goes in steps of 32 wk through two stages of shared memory: the weights by cp.async
// (16-byte chunks, zero-filled past N and K), the f32 activations through registers,
// rounded to the weights' type on the way in (the one rounding this form adds;
// gemm_mma_test derives its tolerance from it). While one step is multiplied, the next
// one's weights are in flight into the other stage and its activations into registers.
// Both tiles are read with ldmatrix from rows of (32 wk + 8) halves: 80 or 272 bytes, so
// the eight 16-byte rows of each 8x8 matrix fall in distinct bank groups (no conflicts).
// Rows, columns and k past the matrix are zeros, so every warp reaches every barrier and
// every mma.
#include "absl/strings/str_cat.h"
#include "kernels/gemm.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {
namespace {

constexpr int kThreads = 128;

// The tile's derived sizes, in elements unless named bytes.
struct Shape {
  explicit Shape(const GemmMmaTile& t)
      : tile(t),
        bk(32 * t.wk),
        row_bytes((bk + 8) * 2),
        warp_rows(t.bm / t.wm),
        warp_cols(t.bn / t.wn),
        a_stage_bytes(t.bm * row_bytes),
        b_stage_bytes(t.bn * row_bytes) {}
  GemmMmaTile tile;
  int bk;         // k per step
  int row_bytes;  // a shared tile row
  int warp_rows, warp_cols;
  int a_stage_bytes, b_stage_bytes;
};

}  // namespace

namespace gen {

std::string GemmMma(KernelBuilder& kb, const GemmConfig& cfg) {
  const GemmMmaTile tile = cfg.MmaTile();
  const Shape sh(tile);
  const Type half = cfg.weight_dtype == ElemType::kF16 ? Type::kF16 : Type::kBF16;
  const Type half2 = cfg.weight_dtype == ElemType::kF16 ? Type::kF16x2 : Type::kBF16x2;
  const auto [x, w, bias, y, m_rows] = gen::DeclareGemmParams(kb, cfg);
  // Two stages of each tile: [stage][m][k] and [stage][n][k] halves. With wk > 1 the
  // activation tiles hold the warps' partial sums at the end ([wk][bm][bn] f32).
  const int a_bytes =
      std::max(2 * sh.a_stage_bytes, tile.wk > 1 ? tile.wk * tile.bm * tile.bn * 4 : 0);
  const Reg a_tile = kb.AddressOf(kb.Shared("a", a_bytes));
  const Reg b_tile = kb.AddressOf(kb.Shared("b", 2 * sh.b_stage_bytes));

  const Reg tid = kb.Special(SReg::kTidX);
  const Reg lane = kb.Special(SReg::kLaneId);
  const Reg warp = kb.Emit(Op::kShr, Type::kU32, {tid, 5});
  const Reg n0 = kb.Emit(Op::kMulLo, Type::kU32, {kb.Special(SReg::kCtaidX), tile.bn});
  const Reg m0 = kb.Emit(Op::kMulLo, Type::kU32, {kb.Special(SReg::kCtaidY), tile.bm});

  // Loader roles. Activations: float4 f = tid + 128 i of the bm x bk tile, row f / (bk / 4),
  // k 4 (f % (bk / 4)). Weights: 16-byte chunk c = tid + 128 i, row c / (bk / 8),
  // k 8 (c % (bk / 8)); with fewer chunks than threads, the first threads only.
  struct Load {
    Reg src_row;  // global address of the row (row 0 when out of range)
    Reg row_ok;   // the row is in the matrix
    Reg loader;   // this thread has a chunk in this round (predicate)
    Reg k;        // k offset in the tile
    Reg dst;      // shared address in stage 0
  };
  auto loads = [&](int count, int per_row, int elem_k, Reg first_row, const Operand& rows,
                   Reg matrix, int64_t row_stride_bytes, Reg tile_base) {
    std::vector<Load> out;
    for (int i = 0; i * kThreads < count; ++i) {
      const Reg f = gen::UAdd(kb, tid, kThreads * i);
      const Reg row = kb.Emit(Op::kDiv, Type::kU32, {f, per_row});
      const Reg k =
          kb.Emit(Op::kMulLo, Type::kU32, {kb.Emit(Op::kRem, Type::kU32, {f, per_row}), elem_k});
      const Reg grow = gen::UAdd(kb, first_row, row);
      const Reg ok = kb.Setp(Cmp::kLt, Type::kU32, grow, rows);
      out.push_back(
          {gen::AddrAdd(kb, matrix, kb.Selp(Type::kU32, grow, 0, ok), row_stride_bytes), ok,
           kb.Setp(Cmp::kLt, Type::kU32, f, count), k,
           kb.Emit(Op::kMadLo, Type::kU32,
                   {row, sh.row_bytes, kb.Emit(Op::kMadLo, Type::kU32, {k, 2, tile_base})})});
    }
    return out;
  };
  const int es = ElemSize(cfg.weight_dtype);
  // Every thread has a float4 in each activation round (CheckTile).
  const std::vector<Load> a_loads =
      loads(tile.bm * sh.bk / 4, sh.bk / 4, 4, m0, m_rows, x, int64_t{cfg.k} * 4, a_tile);
  const std::vector<Load> b_loads =
      loads(tile.bn * sh.bk / 8, sh.bk / 8, 8, n0, cfg.n, w, int64_t{cfg.k} * es, b_tile);

  // Warp (wk, wm, wn) = (warp / (wm wn), its remainder / wn, remainder % wn). ldmatrix row
  // addresses: A (x4): lane l gives row l % 16 of an m16 tile at k 8 (l / 16), so the four
  // matrices are A's fragments a0..a3. B (x4): lane l gives column 8 (l / 16) + l % 8 at
  // k 8 ((l / 8) % 2): matrices 0, 1 are the b fragment of one n8 tile, 2, 3 of the next.
  const Reg wk = kb.Emit(Op::kDiv, Type::kU32, {warp, tile.wm * tile.wn});
  const Reg rest = kb.Emit(Op::kRem, Type::kU32, {warp, tile.wm * tile.wn});
  const Reg wm = kb.Emit(Op::kDiv, Type::kU32, {rest, tile.wn});
  const Reg wn = kb.Emit(Op::kRem, Type::kU32, {rest, tile.wn});
  const Reg warp_k = kb.Emit(Op::kShl, Type::kB32, {wk, 5});  // 32 k of each step
  const Reg a_row = kb.Emit(Op::kMadLo, Type::kU32,
                            {wm, sh.warp_rows, kb.Emit(Op::kAnd, Type::kB32, {lane, 15})});
  const Reg a_k =
      kb.Emit(Op::kMadLo, Type::kU32, {kb.Emit(Op::kShr, Type::kU32, {lane, 4}), 8, warp_k});
  const Reg a_rd =
      kb.Emit(Op::kMadLo, Type::kU32,
              {a_row, sh.row_bytes, kb.Emit(Op::kMadLo, Type::kU32, {a_k, 2, a_tile})});
  const Reg b_col = kb.Emit(Op::kMadLo, Type::kU32,
                            {wn, sh.warp_cols,
                             kb.Emit(Op::kMadLo, Type::kU32,
                                     {kb.Emit(Op::kShr, Type::kU32, {lane, 4}), 8,
                                      kb.Emit(Op::kAnd, Type::kB32, {lane, 7})})});
  const Reg b_k = kb.Emit(
      Op::kMadLo, Type::kU32,
      {kb.Emit(Op::kAnd, Type::kB32, {kb.Emit(Op::kShr, Type::kU32, {lane, 3}), 1}), 8, warp_k});
  const Reg b_rd =
      kb.Emit(Op::kMadLo, Type::kU32,
              {b_col, sh.row_bytes, kb.Emit(Op::kMadLo, Type::kU32, {b_k, 2, b_tile})});

  // acc[i][j]: the warp's m16 tile i and n8 tile j.
  const int mi = sh.warp_rows / 16, nj = sh.warp_cols / 8;
  std::vector<std::vector<std::vector<Reg>>> acc(mi, std::vector<std::vector<Reg>>(nj));
  for (auto& row : acc) {
    for (auto& t : row) {
      for (int e = 0; e < 4; ++e) t.push_back(kb.Mov(Type::kF32, Operand::F32(0.0f)));
    }
  }

  // One barrier a step: after it, the step's tiles are complete and every warp is done
  // with the previous step's, which the next step's copies then overwrite.
  auto copy_weights = [&](Reg k0, Reg stage, Reg active) {
    for (const Load& l : b_loads) {
      const Reg k = gen::UAdd(kb, k0, l.k);
      const Reg ok =
          kb.Emit(Op::kAnd, Type::kPred, {l.row_ok, kb.Setp(Cmp::kLt, Type::kU32, k, cfg.k)});
      auto g = kb.If(kb.Emit(Op::kAnd, Type::kPred, {active, l.loader}));
      kb.CpAsync(ptx::CpAsyncCache::kCg,
                 Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {stage, sh.b_stage_bytes, l.dst})),
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

  const int64_t steps = CeilDiv(cfg.k, sh.bk);
  const Reg step = kb.Mov(Type::kU32, 0);
  const Reg k0 = kb.Mov(Type::kU32, 0);
  const Reg stage = kb.Mov(Type::kU32, 0);  // this step's stage, 0 or 1
  // The first step always loads (k < K for any K > 0): a predicate that is true.
  const Reg first = kb.Setp(Cmp::kEq, Type::kU32, step, 0);
  copy_weights(k0, stage, first);
  load_activations(k0, first);
  const ptx::Label loop = kb.NewLabel("k_loop");
  kb.Bind(loop);
  {
    for (size_t i = 0; i < a_loads.size(); ++i) {
      const std::vector<Reg>& v = a_regs[i];
      kb.St(
          Space::kShared, Type::kB32,
          Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {stage, sh.a_stage_bytes, a_loads[i].dst})),
          {kb.CvtPack(half2, v[1], v[0]), kb.CvtPack(half2, v[3], v[2])});
    }
    kb.CpAsyncWait(0);
    kb.BarSync();
    const Reg next_stage = kb.Emit(Op::kXor, Type::kB32, {stage, 1});
    const Reg next_k0 = gen::UAdd(kb, k0, sh.bk);
    const Reg has_next = kb.Setp(Cmp::kLt, Type::kU32, next_k0, cfg.k);
    copy_weights(next_k0, next_stage, has_next);
    load_activations(next_k0, has_next);
    const Reg a_at = kb.Emit(Op::kMadLo, Type::kU32, {stage, sh.a_stage_bytes, a_rd});
    const Reg b_at = kb.Emit(Op::kMadLo, Type::kU32, {stage, sh.b_stage_bytes, b_rd});
    for (int kk = 0; kk < 2; ++kk) {
      std::vector<std::vector<Reg>> af(mi), bf(nj);
      for (int i = 0; i < mi; ++i) {
        af[i] =
            kb.Ldmatrix(4, false, Operand::Addr(a_at, int64_t{i} * 16 * sh.row_bytes + kk * 32));
      }
      for (int j = 0; j < nj / 2; ++j) {
        const std::vector<Reg> r =
            kb.Ldmatrix(4, false, Operand::Addr(b_at, int64_t{j} * 16 * sh.row_bytes + kk * 32));
        bf[2 * j] = {r[0], r[1]};
        bf[2 * j + 1] = {r[2], r[3]};
      }
      for (int i = 0; i < mi; ++i) {
        for (int j = 0; j < nj; ++j) {
          kb.MmaTo(acc[i][j], ptx::MmaShape::kM16N8K16, half, af[i], bf[j], acc[i][j]);
        }
      }
    }
    kb.MovTo(stage, next_stage);
    kb.MovTo(k0, next_k0);
  }
  kb.EmitTo(step, Op::kAdd, Type::kU32, {step, 1});
  kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, step, steps), loop);

  // Lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8, columns 2t and 2t + 1 of
  // each of its tiles.
  const Reg g = kb.Emit(Op::kShr, Type::kU32, {lane, 2});
  const Reg t2 = kb.Emit(Op::kShl, Type::kB32, {kb.Emit(Op::kAnd, Type::kB32, {lane, 3}), 1});
  const Reg warp_row = kb.Emit(Op::kMadLo, Type::kU32, {wm, sh.warp_rows, g});
  const Reg warp_col = kb.Emit(Op::kMadLo, Type::kU32, {wn, sh.warp_cols, t2});
  // Writes `v` (+ bias) (+ y) to y[row][col] of the tile, when in the matrix.
  auto store = [&](Reg row, Reg col, Reg v) {
    const Reg grow = gen::UAdd(kb, m0, row), gcol = gen::UAdd(kb, n0, col);
    const Reg ok = kb.Emit(
        Op::kAnd, Type::kPred,
        {kb.Setp(Cmp::kLt, Type::kU32, gcol, cfg.n), kb.Setp(Cmp::kLt, Type::kU32, grow, m_rows)});
    auto guard = kb.If(ok);
    if (cfg.has_bias) {
      v = gen::FAdd(
          kb, v,
          kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, bias, gcol, 4))));
    }
    const Reg ya = gen::AddrAdd(kb, gen::AddrAdd(kb, y, grow, int64_t{cfg.n} * 4), gcol, 4);
    if (cfg.accumulate) v = gen::FAdd(kb, kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(ya)), v);
    kb.St(Space::kGlobal, Type::kF32, Operand::Addr(ya), {v});
  };
  if (tile.wk == 1) {
    for (int i = 0; i < mi; ++i) {
      for (int j = 0; j < nj; ++j) {
        for (int e = 0; e < 4; ++e) {
          store(gen::UAdd(kb, warp_row, 16 * i + 8 * (e / 2)),
                gen::UAdd(kb, warp_col, 8 * j + e % 2), acc[i][j][e]);
        }
      }
    }
  } else {
    // Every warp's partial tile to shared memory, then each thread sums its outputs over
    // the k slices in warp order.
    kb.BarSync();  // the last step's tiles are read
    const int64_t slice_bytes = int64_t{tile.bm} * tile.bn * 4;
    const Reg part = kb.Emit(Op::kMadLo, Type::kU32, {wk, static_cast<int>(slice_bytes), a_tile});
    for (int i = 0; i < mi; ++i) {
      for (int j = 0; j < nj; ++j) {
        for (int e = 0; e < 4; ++e) {
          const Reg row = gen::UAdd(kb, warp_row, 16 * i + 8 * (e / 2));
          const Reg col = gen::UAdd(kb, warp_col, 8 * j + e % 2);
          const Reg at = kb.Emit(Op::kMadLo, Type::kU32,
                                 {kb.Emit(Op::kMadLo, Type::kU32, {row, tile.bn, col}), 4, part});
          kb.St(Space::kShared, Type::kF32, Operand::Addr(at), {acc[i][j][e]});
        }
      }
    }
    kb.BarSync();
    for (int i = 0; i * kThreads < tile.bm * tile.bn; ++i) {
      const Reg o = gen::UAdd(kb, tid, kThreads * i);
      const Reg at = kb.Emit(Op::kMadLo, Type::kU32, {o, 4, a_tile});
      Reg sum = kb.Ld1(Space::kShared, Type::kF32, Operand::Addr(at));
      for (int s = 1; s < tile.wk; ++s) {
        sum = gen::FAdd(kb, sum,
                        kb.Ld1(Space::kShared, Type::kF32, Operand::Addr(at, s * slice_bytes)));
      }
      store(kb.Emit(Op::kDiv, Type::kU32, {o, tile.bn}),
            kb.Emit(Op::kRem, Type::kU32, {o, tile.bn}), sum);
    }
  }
  kb.Ret();
  return absl::StrCat("tensor cores: ", tile.bm, "x", tile.bn, " CTA tile, warps ", tile.wm, "x",
                      tile.wn, "x", tile.wk, " of mma.m16n8k16, k step ", sh.bk);
}

}  // namespace gen

}  // namespace ptxserve::kernels
