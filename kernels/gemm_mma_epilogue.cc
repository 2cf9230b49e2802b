// The epilogues of gen::GemmMma (gemm_mma.cc; gemm_mma_parts.h): split-K's raw partial
// sums, the direct stores of one k slice's warps (bias, residual, SwiGLU and the output's
// type applied in registers), and with k split over the warps their sum through shared
// memory, in warp order.
#include <functional>
#include <vector>

#include "kernels/gemm_mma_parts.h"

namespace ptxserve::kernels::gen {
namespace {

// Split-K's epilogue: a warp of one k slice (wk = 1) stores its accumulators acc[i][j] raw
// to slice ctaid.z of the workspace y ([split_k][M][cols], cols = n or 2n with swiglu, whose
// n8 tiles 2p and 2p + 1 go to the gate and up halves of a row). Lane (g, t) holds rows
// row0 + 16 i + 8 h, columns col0 + 8 j + c (c = 0, 1): pairs as one 8-byte store when n is
// even.
void StoreSplitPartials(ptx::KernelBuilder& kb, const GemmConfig& cfg,
                        const std::vector<std::vector<std::vector<Reg>>>& acc, Reg y, Reg m_rows,
                        Reg row0, Reg col0) {
  const int cols = cfg.swiglu ? 2 * cfg.n : cfg.n;
  const int mi = static_cast<int>(acc.size());
  const int out_tiles = static_cast<int>(acc[0].size()) / (cfg.swiglu ? 2 : 1);
  const Reg slice_row = kb.Emit(Op::kMadLo, Type::kU32, {kb.Special(SReg::kCtaidZ), m_rows, row0});
  const Reg y0 = gen::AddrAdd(kb, gen::AddrAdd(kb, y, slice_row, int64_t{cols} * 4), col0, 4);
  const int width = cfg.n % 2 == 0 ? 2 : 1;  // columns a store
  std::vector<std::vector<Reg>> col_ok(out_tiles, std::vector<Reg>(2));
  for (int j = 0; j < out_tiles; ++j) {
    for (int c = 0; c < 2; c += width) {
      col_ok[j][c] = kb.Setp(Cmp::kLt, Type::kU32, gen::UAdd(kb, col0, 8 * j + c), cfg.n);
    }
  }
  for (int i = 0; i < mi; ++i) {
    for (int h = 0; h < 2; ++h) {
      const Reg row_ok = kb.Setp(Cmp::kLt, Type::kU32, gen::UAdd(kb, row0, 16 * i + 8 * h), m_rows);
      for (int j = 0; j < out_tiles; ++j) {
        for (int c = 0; c < 2; c += width) {
          const int64_t off = (int64_t{16 * i + 8 * h} * cols + 8 * j + c) * 4;
          auto guard = kb.If(kb.Emit(Op::kAnd, Type::kPred, {row_ok, col_ok[j][c]}));
          // The accumulator tiles of this output tile: one, or gate and up.
          for (int half = 0; half < (cfg.swiglu ? 2 : 1); ++half) {
            const std::vector<Reg>& a = acc[i][cfg.swiglu ? 2 * j + half : j];
            const std::vector<Reg> v(a.begin() + 2 * h + c, a.begin() + 2 * h + c + width);
            kb.St(Space::kGlobal, Type::kF32, Operand::Addr(y0, off + int64_t{half} * cfg.n * 4),
                  v);
          }
        }
      }
    }
  }
}

}  // namespace

void GemmMmaEpilogue(KernelBuilder& kb, const GemmConfig& cfg, const MmaShape& sh,
                     const MmaCta& cta, const MmaWarpSums& sums) {
  const GemmMmaTile& tile = sh.tile;
  const int threads = sh.threads;
  const int ys = ElemSize(cfg.y_dtype);
  const int out_cols = cfg.swiglu ? tile.bn / 2 : tile.bn;  // output columns of the CTA
  const bool split = cfg.split_k > 1;
  const int mi = sh.warp_rows / 16, nj = sh.warp_cols / 8;
  const Reg bias = cta.bias, y = cta.y, m_rows = cta.m_rows, a_tile = cta.a_tile;
  const Reg tid = cta.tid, lane = cta.lane, n0 = cta.n0, m0 = cta.m0;
  const Reg wk = sums.wk, wm = sums.wm, wn = sums.wn;
  const std::vector<std::vector<std::vector<Reg>>>& acc = sums.acc;

  // Lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8, columns 2t and 2t + 1 of
  // each of its tiles.
  const Reg g = kb.Emit(Op::kShr, Type::kU32, {lane, 2});
  const Reg t2 = kb.Emit(Op::kShl, Type::kB32, {kb.Emit(Op::kAnd, Type::kB32, {lane, 3}), 1});
  const Reg warp_row = kb.Emit(Op::kMadLo, Type::kU32, {wm, sh.warp_rows, g});
  // Writes `v` (+ bias) (+ y) to y[row][col] of the CTA's output tile, when in the matrix.
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
    const Reg ya = gen::AddrAdd(kb, gen::AddrAdd(kb, y, grow, int64_t{cfg.n} * ys), gcol, ys);
    if (cfg.accumulate) v = gen::FAdd(kb, kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(ya)), v);
    gen::StoreFromF32(kb, cfg.y_dtype, ya, 0, {v}, ys);
  };
  if (split) {
    StoreSplitPartials(
        kb, cfg, acc, y, m_rows, gen::UAdd(kb, m0, warp_row),
        gen::UAdd(kb, n0,
                  kb.Emit(Op::kMadLo, Type::kU32, {wn, sh.warp_cols / (cfg.swiglu ? 2 : 1), t2})));
  } else if (tile.wk == 1) {
    // The lane's outputs lie a constant apart from its first (rows 16 i + 8 h, columns
    // 8 j + c): one pointer each into y and the bias, predicates per row and per column
    // pair, 8-byte accesses of column pairs when n is even (else one column at a time). The
    // residual's loads of a row are issued together, before their adds.
    const int out_tiles = cfg.swiglu ? nj / 2 : nj;  // the warp's n8 output tiles
    const Reg warp_col =
        kb.Emit(Op::kMadLo, Type::kU32, {wn, sh.warp_cols / (cfg.swiglu ? 2 : 1), t2});
    const Reg row0 = gen::UAdd(kb, m0, warp_row), col0 = gen::UAdd(kb, n0, warp_col);
    const Reg y0 = gen::AddrAdd(kb, gen::AddrAdd(kb, y, row0, int64_t{cfg.n} * ys), col0, ys);
    const int width = cfg.n % 2 == 0 ? 2 : 1;  // columns an access
    // col_ok[j][c]: the lane's column c of output tile j is in the matrix (with pairs, one
    // predicate for both: n and the column are even).
    std::vector<std::vector<Reg>> col_ok(out_tiles);
    for (int j = 0; j < out_tiles; ++j) {
      for (int c = 0; c < 3 - width; ++c) {
        col_ok[j].push_back(kb.Setp(Cmp::kLt, Type::kU32, gen::UAdd(kb, col0, 8 * j + c), cfg.n));
      }
    }
    // Output tile j's accesses: columns c .. c + width - 1 of its lane's pair.
    auto for_access = [&](const std::function<void(int j, int c)>& fn) {
      for (int j = 0; j < out_tiles; ++j) {
        for (int c = 0; c < 2; c += width) fn(j, c);
      }
    };
    auto col_pred = [&](int j, int c) { return col_ok[j][width == 1 ? c : 0]; };
    std::vector<std::vector<Reg>> bias_v(out_tiles);
    if (cfg.has_bias) {
      const Reg b0 = gen::AddrAdd(kb, bias, col0, 4);
      for_access([&](int j, int c) {
        std::vector<Reg> r;
        for (int e = 0; e < width; ++e) r.push_back(kb.Mov(Type::kF32, Operand::F32(0.0f)));
        auto guard = kb.If(col_pred(j, c));
        kb.LdTo(Space::kGlobal, Type::kF32, Operand::Addr(b0, (8 * j + c) * 4), r);
        bias_v[j].insert(bias_v[j].end(), r.begin(), r.end());
      });
    }
    for (int i = 0; i < mi; ++i) {
      for (int h = 0; h < 2; ++h) {
        const Reg row_ok =
            kb.Setp(Cmp::kLt, Type::kU32, gen::UAdd(kb, row0, 16 * i + 8 * h), m_rows);
        struct Out {
          int64_t off;
          Reg ok;
          std::vector<Reg> v;
        };
        std::vector<Out> outs;
        for_access([&](int j, int c) {
          std::vector<Reg> v;
          for (int e = 2 * h + c; e < 2 * h + c + width; ++e) {
            v.push_back(cfg.swiglu ? gen::SiluTimes(kb, acc[i][2 * j][e], acc[i][2 * j + 1][e])
                                   : acc[i][j][e]);
            if (cfg.has_bias) v.back() = gen::FAdd(kb, v.back(), bias_v[j][e - 2 * h]);
          }
          outs.push_back({(int64_t{16 * i + 8 * h} * cfg.n + 8 * j + c) * ys,
                          kb.Emit(Op::kAnd, Type::kPred, {row_ok, col_pred(j, c)}), v});
        });
        std::vector<std::vector<Reg>> old(outs.size());
        if (cfg.accumulate) {
          for (size_t o = 0; o < outs.size(); ++o) {
            for (size_t e = 0; e < outs[o].v.size(); ++e) old[o].push_back(kb.NewReg(Type::kF32));
            auto guard = kb.If(outs[o].ok);
            kb.LdTo(Space::kGlobal, Type::kF32, Operand::Addr(y0, outs[o].off), old[o]);
          }
        }
        for (size_t o = 0; o < outs.size(); ++o) {
          auto guard = kb.If(outs[o].ok);
          std::vector<Reg> v = outs[o].v;
          if (cfg.accumulate) {
            for (size_t e = 0; e < v.size(); ++e) v[e] = gen::FAdd(kb, old[o][e], v[e]);
          }
          gen::StoreFromF32(kb, cfg.y_dtype, y0, outs[o].off, v, width * ys);
        }
      }
    }
  } else {
    // Every warp's partial tile to shared memory, then each thread sums its outputs over
    // the k slices in warp order.
    kb.BarSync();  // the last step's tiles are read
    const Reg warp_col = kb.Emit(Op::kMadLo, Type::kU32, {wn, sh.warp_cols, t2});
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
    // The sum of tile column c over the k slices.
    auto summed = [&](Reg row, Reg c) {
      const Reg at = kb.Emit(Op::kMadLo, Type::kU32,
                             {kb.Emit(Op::kMadLo, Type::kU32, {row, tile.bn, c}), 4, a_tile});
      Reg sum = kb.Ld1(Space::kShared, Type::kF32, Operand::Addr(at));
      for (int s = 1; s < tile.wk; ++s) {
        sum = gen::FAdd(kb, sum,
                        kb.Ld1(Space::kShared, Type::kF32, Operand::Addr(at, s * slice_bytes)));
      }
      return sum;
    };
    for (int i = 0; i * threads < tile.bm * out_cols; ++i) {
      const Reg o = gen::UAdd(kb, tid, threads * i);
      const Reg row = gen::DivConst(kb, o, out_cols), col = gen::RemConst(kb, o, out_cols);
      if (cfg.swiglu) {
        // Output column j's gate is tile column 16 (j / 8) + j % 8, its up 8 further.
        const Reg gate_col = kb.Emit(
            Op::kMadLo, Type::kU32,
            {kb.Emit(Op::kShr, Type::kU32, {col, 3}), 16, kb.Emit(Op::kAnd, Type::kB32, {col, 7})});
        store(row, col,
              gen::SiluTimes(kb, summed(row, gate_col), summed(row, gen::UAdd(kb, gate_col, 8))));
      } else {
        store(row, col, summed(row, col));
      }
    }
  }
}

}  // namespace ptxserve::kernels::gen
