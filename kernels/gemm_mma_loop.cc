// The staging and k loop of gen::GemmMma (gemm_mma.cc; gemm_mma_parts.h): the loaders'
// roles, the weights' cp.async stages (or the MmaWeightSource's), the activations' register
// stage, and per k step the barrier, the next copies and loads, and the ldmatrix and
// mma.sync of the step's tiles.
#include <algorithm>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/gemm_mma_parts.h"

namespace ptxserve::kernels::gen {

MmaWarpSums GemmMmaMainLoop(KernelBuilder& kb, const GemmConfig& cfg, const MmaShape& sh,
                            const MmaCta& cta, MmaWeightSource* source) {
  const GemmMmaTile& tile = sh.tile;
  // A source's f16 tiles take two stages, written before each step's barrier.
  const int b_stages = source ? 2 : tile.stages;
  const int threads = sh.threads;
  const Type half = cfg.weight_dtype == ElemType::kF16 ? Type::kF16 : Type::kBF16;
  const Type half2 = cfg.weight_dtype == ElemType::kF16 ? Type::kF16x2 : Type::kBF16x2;
  const Reg x = cta.x, w = cta.w, m_rows = cta.m_rows, a_tile = cta.a_tile, b_tile = cta.b_tile;
  const Reg tid = cta.tid, lane = cta.lane, warp = cta.warp, n0 = cta.n0, m0 = cta.m0;
  const bool split = cfg.split_k > 1;

  // Loader roles. Round i of a thread's chunks is chunk f = tid + threads i of a tile of
  // `per_row` chunks a row: every round has the same k, (f % per_row) elements of a chunk,
  // and rows a constant apart (threads is a multiple of per_row), so one global pointer a
  // matrix, advanced a step at a time, and constant offsets address them all. Rows past the
  // matrix are never loaded (activations: their registers stay zero) or zero-filled
  // (weights); they only reach outputs that are never stored.
  const int es = ElemSize(cfg.weight_dtype);
  const bool x_half = cfg.x_dtype != ElemType::kF32;
  const int xs = ElemSize(cfg.x_dtype);
  struct Round {
    Reg ptr;                   // global pointer (advanced by a step's k bytes after each use)
    int64_t off;               // bytes from ptr
    std::optional<Reg> guard;  // activations: the row is in the matrix; weights: the thread
                               // has a chunk this round (unset: always)
    Reg size;                  // weights: 16, or 0 to zero-fill a row past the matrix
  };
  // Activations, four elements a chunk (every thread has one each round: CheckAcrossFields). With
  // 8 chunks a row a warp covers 4 rows: rows 8 (f / 64) + (f / 32) % 2 + {0, 4, 2, 6}, whose
  // 20-word rows start 16 words apart mod 32 pairwise (no bank conflicts in the stores);
  // round i's row is round 0's + i threads / 8 either way.
  const int a_per_row = sh.bk / 4, a_rounds = tile.bm * a_per_row / threads;
  const int a_row_step = threads / a_per_row;
  Reg a_r0;
  if (a_per_row == 8) {
    const Reg lr = kb.Emit(Op::kAnd, Type::kB32, {kb.Emit(Op::kShr, Type::kU32, {tid, 3}), 3});
    const Reg perm =
        kb.Emit(Op::kMadLo, Type::kU32,
                {kb.Emit(Op::kAnd, Type::kB32, {lr, 1}), 4,
                 kb.Emit(Op::kShl, Type::kB32, {kb.Emit(Op::kShr, Type::kU32, {lr, 1}), 1})});
    a_r0 = gen::UAdd(
        kb,
        kb.Emit(Op::kMadLo, Type::kU32,
                {kb.Emit(Op::kShr, Type::kU32, {tid, 6}), 8,
                 kb.Emit(Op::kAnd, Type::kB32, {kb.Emit(Op::kShr, Type::kU32, {tid, 5}), 1})}),
        perm);
  } else {
    a_r0 = gen::DivConst(kb, tid, a_per_row);
  }
  const Reg a_k = kb.Emit(Op::kShl, Type::kB32, {gen::RemConst(kb, tid, a_per_row), 2});
  const Reg a_dst =
      kb.Emit(Op::kMadLo, Type::kU32,
              {a_r0, sh.row_bytes, kb.Emit(Op::kMadLo, Type::kU32, {a_k, 2, a_tile})});
  const Reg a_g0 = gen::UAdd(kb, m0, a_r0);
  const Reg a_ptr = gen::AddrAdd(kb, gen::AddrAdd(kb, x, a_g0, int64_t{cfg.k} * xs), a_k, xs);
  std::vector<Round> a_round;
  for (int i = 0; i < a_rounds; ++i) {
    a_round.push_back({a_ptr, int64_t{i} * a_row_step * cfg.k * xs,
                       kb.Setp(Cmp::kLt, Type::kU32, gen::UAdd(kb, a_g0, i * a_row_step), m_rows),
                       Reg()});
  }
  // Weights, 16-byte chunks (with fewer chunks than threads, the first threads only). With
  // swiglu tile row r is output column j = n0 + 8 (r / 16) + r % 8's gate (r % 16 < 8) or
  // up row; rounds 16 or more rows apart keep that a constant apart too, else each round
  // has a pointer of its own.
  const int b_per_row = sh.bk / 8, b_chunks = tile.bn * b_per_row;
  const int b_rounds = static_cast<int>(CeilDiv(b_chunks, threads));
  const int b_row_step = threads / b_per_row;
  const Reg b_r0 = gen::DivConst(kb, tid, b_per_row);
  const Reg b_k = kb.Emit(Op::kShl, Type::kB32, {gen::RemConst(kb, tid, b_per_row), 3});
  const Reg b_dst =
      kb.Emit(Op::kMadLo, Type::kU32,
              {b_r0, sh.row_bytes, kb.Emit(Op::kMadLo, Type::kU32, {b_k, 2, b_tile})});
  // Row r's global row and whether it is in the matrix.
  auto b_global_row = [&](Reg r) {
    if (!cfg.swiglu) {
      const Reg grow = gen::UAdd(kb, n0, r);
      return std::pair{grow, kb.Setp(Cmp::kLt, Type::kU32, grow, cfg.n)};
    }
    const Reg j = gen::UAdd(
        kb, n0,
        kb.Emit(Op::kMadLo, Type::kU32,
                {kb.Emit(Op::kShr, Type::kU32, {r, 4}), 8, kb.Emit(Op::kAnd, Type::kB32, {r, 7})}));
    const Reg up = kb.Emit(Op::kAnd, Type::kB32, {kb.Emit(Op::kShr, Type::kU32, {r, 3}), 1});
    return std::pair{kb.Emit(Op::kMadLo, Type::kU32, {up, cfg.n, j}),
                     kb.Setp(Cmp::kLt, Type::kU32, j, cfg.n)};
  };
  auto b_pointer = [&](Reg grow) {
    return gen::AddrAdd(kb, gen::AddrAdd(kb, w, grow, int64_t{cfg.k} * es), b_k, es);
  };
  const bool b_shared_ptr = !cfg.swiglu || b_row_step % 16 == 0;
  const int b_ptr_rows = cfg.swiglu ? b_row_step / 2 : b_row_step;  // global rows a round
  std::vector<Round> b_round;
  std::vector<Reg> b_ptrs;
  if (source) source->Begin(kb, w, gen::UAdd(kb, b_tile, 2 * sh.b_stage_bytes), n0);
  for (int i = 0; i < (source ? 0 : b_rounds); ++i) {
    const Reg r = gen::UAdd(kb, b_r0, i * b_row_step);
    auto [grow, ok] = b_global_row(r);
    if (i == 0 || !b_shared_ptr) b_ptrs.push_back(b_pointer(grow));
    std::optional<Reg> has_chunk;
    if ((i + 1) * threads > b_chunks) {
      has_chunk = kb.Setp(Cmp::kLt, Type::kU32, tid, b_chunks - i * threads);
    }
    b_round.push_back({b_ptrs.back(), b_shared_ptr ? int64_t{i} * b_ptr_rows * cfg.k * es : 0,
                       has_chunk, kb.Selp(Type::kU32, 16, 0, ok)});
  }

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
  const Reg a_rd_k =
      kb.Emit(Op::kMadLo, Type::kU32, {kb.Emit(Op::kShr, Type::kU32, {lane, 4}), 8, warp_k});
  const Reg a_rd =
      kb.Emit(Op::kMadLo, Type::kU32,
              {a_row, sh.row_bytes, kb.Emit(Op::kMadLo, Type::kU32, {a_rd_k, 2, a_tile})});
  const Reg b_col = kb.Emit(Op::kMadLo, Type::kU32,
                            {wn, sh.warp_cols,
                             kb.Emit(Op::kMadLo, Type::kU32,
                                     {kb.Emit(Op::kShr, Type::kU32, {lane, 4}), 8,
                                      kb.Emit(Op::kAnd, Type::kB32, {lane, 7})})});
  const Reg b_rd_k = kb.Emit(
      Op::kMadLo, Type::kU32,
      {kb.Emit(Op::kAnd, Type::kB32, {kb.Emit(Op::kShr, Type::kU32, {lane, 3}), 1}), 8, warp_k});
  const Reg b_rd =
      kb.Emit(Op::kMadLo, Type::kU32,
              {b_col, sh.row_bytes, kb.Emit(Op::kMadLo, Type::kU32, {b_rd_k, 2, b_tile})});

  // acc[i][j]: the warp's m16 tile i and n8 tile j.
  const int mi = sh.warp_rows / 16, nj = sh.warp_cols / 8;
  std::vector<std::vector<std::vector<Reg>>> acc(mi, std::vector<std::vector<Reg>>(nj));
  for (auto& row : acc) {
    for (auto& t : row) {
      for (int e = 0; e < 4; ++e) t.push_back(kb.Mov(Type::kF32, Operand::F32(0.0f)));
    }
  }

  // Step t's k runs past K only in the last step, when K is not a multiple of the step
  // (`tail`); such a step's copies zero-fill and its activation loads are masked by k. Steps
  // past the last load nothing. Which of the three a step is depends on t alone: the prologue
  // picks at generation time, the loop by uniform branches on its step counter.
  const int64_t steps = CeilDiv(cfg.k, sh.bk);
  const int64_t full_steps = cfg.k / sh.bk;
  const bool has_tail = full_steps < steps;
  // Split: this CTA's steps [begin, end), the end of its full steps, and the tail step when
  // the slice has it (else a step no slice reaches).
  struct {
    Reg begin, end, full_end, tail;
  } slice;
  if (split) {
    const int64_t per_slice = CeilDiv(steps, cfg.split_k);
    slice.begin = kb.Emit(Op::kMulLo, Type::kU32, {kb.Special(SReg::kCtaidZ), per_slice});
    slice.end = kb.Emit(Op::kMin, Type::kU32, {gen::UAdd(kb, slice.begin, per_slice), steps});
    slice.full_end = kb.Emit(Op::kMin, Type::kU32, {slice.end, full_steps});
    slice.tail = kb.Selp(Type::kU32, steps - 1, int64_t{0xffffffff},
                         kb.Setp(Cmp::kEq, Type::kU32, slice.end, steps));
  }
  // The weights of step t (at k0, a register, only read by a tail) into the stage at `dst`.
  auto copy_weights = [&](Reg dst, bool tail, const std::function<Reg()>& k0) {
    Reg k_ok;
    if (tail) k_ok = kb.Setp(Cmp::kLt, Type::kU32, gen::UAdd(kb, k0(), b_k), cfg.k);
    for (int i = 0; i < b_rounds; ++i) {
      const Round& r = b_round[i];
      const Reg size = tail ? kb.Selp(Type::kU32, r.size, 0, k_ok) : r.size;
      std::optional<KernelBuilder::ScopedGuard> g;
      if (r.guard) g.emplace(&kb, *r.guard, false);
      kb.CpAsync(ptx::CpAsyncCache::kCg, Operand::Addr(dst, int64_t{i} * b_row_step * sh.row_bytes),
                 Operand::Addr(r.ptr, r.off), 16, size);
    }
  };
  // A chunk's registers: four f32, or two b32 words of half pairs (zero bits are 0.0 too).
  const Type a_type = x_half ? Type::kB32 : Type::kF32;
  const Operand a_zero = x_half ? Operand(0) : Operand::F32(0.0f);
  std::vector<std::vector<Reg>> a_regs(a_rounds, std::vector<Reg>(x_half ? 2 : 4));
  for (auto& v : a_regs) {
    for (Reg& r : v) r = kb.Mov(a_type, a_zero);  // rows never loaded stay 0
  }
  auto load_activations = [&](bool tail, const std::function<Reg()>& k0) {
    Reg k_ok;
    if (tail) {
      k_ok = kb.Setp(Cmp::kLt, Type::kU32, gen::UAdd(kb, k0(), a_k), cfg.k);
      auto g = kb.If(k_ok, /*negate=*/true);
      for (const auto& v : a_regs) {
        for (Reg r : v) kb.MovTo(r, a_zero);
      }
    }
    for (int i = 0; i < a_rounds; ++i) {
      const Round& r = a_round[i];
      auto g = kb.If(tail ? kb.Emit(Op::kAnd, Type::kPred, {*r.guard, k_ok}) : *r.guard);
      kb.LdTo(Space::kGlobal, a_type, Operand::Addr(r.ptr, r.off), a_regs[i]);
    }
  };
  auto advance = [&](const std::vector<Reg>& ptrs, int64_t bytes) {
    for (Reg p : ptrs) kb.EmitTo(p, Op::kAdd, Type::kU64, {p, bytes});
  };
  // By `count` (a register) steps of `bytes`.
  auto advance_steps = [&](const std::vector<Reg>& ptrs, Reg count, int64_t bytes) {
    const Reg off = kb.Emit(Op::kMulWide, Type::kU32, {count, bytes});
    for (Reg p : ptrs) kb.EmitTo(p, Op::kAdd, Type::kU64, {p, off});
  };
  const int64_t a_step_bytes = int64_t{sh.bk} * xs, b_step_bytes = int64_t{sh.bk} * es;
  // Step s + ahead (s a register): full while s + ahead < full_steps, the tail at
  // s + ahead == steps - 1 (when there is one), and nothing after; split, both bounded by
  // the slice's end.
  const auto ByStep = [&](Reg s, int ahead, const std::function<void(bool tail)>& load) {
    const ptx::Label done = kb.NewLabel("loaded");
    const ptx::Label not_fast = kb.NewLabel("not_full");
    if (split) {
      kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, gen::UAdd(kb, s, ahead), slice.full_end), not_fast);
    } else {
      kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, s, std::max<int64_t>(full_steps - ahead, 0)),
               not_fast);
    }
    load(false);
    kb.Bra(done);
    kb.Bind(not_fast);
    if (split && has_tail) {
      kb.BraIf(kb.Setp(Cmp::kNe, Type::kU32, gen::UAdd(kb, s, ahead), slice.tail), done);
      load(true);
    } else if (has_tail && steps - 1 - ahead >= 0) {
      kb.BraIf(kb.Setp(Cmp::kNe, Type::kU32, s, steps - 1 - ahead), done);
      load(true);
    }
    kb.Bind(done);
  };
  if (split) {
    // The slice's first steps, by its step registers; the pointers start at its k.
    advance_steps(b_ptrs, slice.begin, b_step_bytes);
    advance_steps({a_ptr}, slice.begin, a_step_bytes);
    for (int t = 0; t + 1 < tile.stages; ++t) {
      const Reg dst = gen::UAdd(kb, b_dst, t * sh.b_stage_bytes);
      ByStep(slice.begin, t, [&](bool tail) {
        copy_weights(dst, tail, [&] {
          return kb.Emit(Op::kMadLo, Type::kU32, {slice.begin, sh.bk, t * sh.bk});
        });
      });
      advance(b_ptrs, b_step_bytes);
      kb.CpAsyncCommit();
    }
    ByStep(slice.begin, 0, [&](bool tail) {
      load_activations(tail, [&] { return kb.Emit(Op::kMulLo, Type::kU32, {slice.begin, sh.bk}); });
    });
    advance({a_ptr}, a_step_bytes);
  }
  // Statically known step t: its copies or loads, or nothing past the last step.
  for (int t = 0; !split && t + 1 < tile.stages; ++t) {
    if (t < steps && source) {
      source->Copy(kb, kb.Mov(Type::kU32, t));
    } else if (t < steps) {
      copy_weights(gen::UAdd(kb, b_dst, t * sh.b_stage_bytes), t >= full_steps,
                   [&] { return kb.Mov(Type::kU32, t * sh.bk); });
      advance(b_ptrs, b_step_bytes);
    }
    kb.CpAsyncCommit();
  }
  if (!split) {
    load_activations(full_steps == 0, [&] { return kb.Mov(Type::kU32, 0); });
    advance({a_ptr}, a_step_bytes);
  }

  // Loop-carried stage offsets: activations 0 or one stage; the weights' stage multiplied
  // and the one the step's copies refill (the previous step's).
  const Reg a_off = kb.Mov(Type::kU32, 0);
  const Reg b_off = kb.Mov(Type::kU32, 0);
  const Reg b_refill = kb.Mov(Type::kU32, (tile.stages - 1) * sh.b_stage_bytes);
  const Reg step = split ? kb.Mov(Type::kU32, slice.begin) : kb.Mov(Type::kU32, 0);
  const auto by_step = [&](int ahead, const std::function<void(bool tail)>& load) {
    ByStep(step, ahead, load);
  };
  const ptx::Label loop = kb.NewLabel("k_loop");
  kb.Bind(loop);
  {
    // One barrier a step: after it, the step's tiles are complete and every warp is done
    // with the previous step's, whose weight stage the copies issued after it refill. Every
    // thread commits a group each step, empty or not, so that "all but the newest
    // stages - 2 groups" is always the step about to be multiplied.
    const Reg a_st = gen::UAdd(kb, a_dst, a_off);
    for (int i = 0; i < a_rounds; ++i) {
      const std::vector<Reg>& v = a_regs[i];
      kb.St(Space::kShared, Type::kB32, Operand::Addr(a_st, int64_t{i} * a_row_step * sh.row_bytes),
            x_half
                ? v
                : std::vector<Reg>{kb.CvtPack(half2, v[1], v[0]), kb.CvtPack(half2, v[3], v[2])});
    }
    kb.CpAsyncWait(tile.stages - 2);
    if (source) source->Decode(kb, step, gen::UAdd(kb, b_tile, b_off), sh.row_bytes);
    kb.BarSync();
    const Reg refill_dst = gen::UAdd(kb, b_dst, b_refill);
    by_step(tile.stages - 1, [&](bool tail) {
      if (source) return source->Copy(kb, gen::UAdd(kb, step, tile.stages - 1));
      copy_weights(refill_dst, tail, [&] {
        return kb.Emit(Op::kMadLo, Type::kU32, {step, sh.bk, (tile.stages - 1) * sh.bk});
      });
    });
    kb.CpAsyncCommit();
    advance(b_ptrs, b_step_bytes);
    by_step(1, [&](bool tail) {
      load_activations(tail, [&] { return kb.Emit(Op::kMadLo, Type::kU32, {step, sh.bk, sh.bk}); });
    });
    advance({a_ptr}, a_step_bytes);
    const Reg a_at = gen::UAdd(kb, a_rd, a_off);
    const Reg b_at = gen::UAdd(kb, b_rd, b_off);
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
    kb.EmitTo(a_off, Op::kSub, Type::kU32, {sh.a_stage_bytes, a_off});
    kb.MovTo(b_refill, b_off);
    const Reg b_next = gen::UAdd(kb, b_off, sh.b_stage_bytes);
    kb.MovTo(b_off, kb.Selp(Type::kU32, 0, b_next,
                            kb.Setp(Cmp::kEq, Type::kU32, b_next, b_stages * sh.b_stage_bytes)));
  }
  kb.EmitTo(step, Op::kAdd, Type::kU32, {step, 1});
  if (split) {
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, step, slice.end), loop);
  } else {
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, step, steps), loop);
  }
  return {wk, wm, wn, std::move(acc)};
}

}  // namespace ptxserve::kernels::gen
