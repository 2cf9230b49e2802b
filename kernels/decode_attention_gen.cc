// PTX of decode attention (contract in decode_attention.h).
//
// One CTA = one query row x one chunk of a GQA group's query heads x one split. Each
// warp walks the CTA's token range a tile at a time: steps_per_tile steps of
// tokens_per_warp tokens, a "sub-group" of lanes_per_token lanes owning one token of a
// step, each lane a slice of head_dim read with 128-bit loads (interleaved so one load
// instruction covers contiguous memory). A warp issues all of a tile's K/V loads before
// it uses any, and loads the next tile's block numbers while they are in flight: decode
// attention is bound by DRAM only when enough loads are in flight (Little's law), and one
// dependent load at a time left it bound by latency. Every K/V row is read once and used
// for all of the CTA's query heads. Scores are reduced with a butterfly (every lane gets
// the sum: no broadcast needed) and folded into an online softmax in base 2 (q is
// pre-scaled by scale*log2 e), rescaling the running sums once per tile. Sub-groups, then warps,
// are merged at the end: warps through shared memory with per-warp max/sum slots,
// every output thread re-deriving the global max/sum itself.
//
// Split: the CTAs of a (row, head chunk) write normalised partials and log-sum-exps, and
// the last of them to count itself done merges them (MergeIfLast): one launch where a
// separate merge kernel cost a launch's latency, which at batch 1 is most of the merge.
//
// The token loop runs the same number of iterations in every thread of a CTA
// (out-of-range tokens are clamped to a valid one and masked to -inf), so the
// shuffles and the barrier are always reached by the whole CTA.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/decode_attention.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
// q, K/V and the block tables are read-only for the whole launch: the non-coherent
// (texture) path caches them without coherence traffic.
constexpr ptx::CacheOp kReadOnly = ptx::CacheOp::kNonCoherent;
// Initial running max: finite, so max - max of two "empty" states is 0, not NaN.
constexpr float kEmptyMax = -1e30f;

// The registers of DecodeAttentionArgs, in .param order.
struct Params {
  Reg q, k_pool, v_pool, block_tables, seq_lens, query_start, positions, out, partial_out,
      partial_lse, split_counters;
  Reg max_blocks, num_seqs, num_rows, scale, partition;
};

Params LoadParams(KernelBuilder& kb, const DecodeAttentionConfig& cfg) {
  using A = DecodeAttentionArgs;
  // Pointers a mode does not use are declared (one signature for all variants) but
  // not converted or dereferenced.
  std::vector<DevicePtr A::*> unused;
  if (!cfg.ragged) unused = {&A::query_start, &A::positions};
  if (!cfg.split) {
    for (DevicePtr A::*m : {&A::partial_out, &A::partial_lse, &A::split_counters}) {
      unused.push_back(m);
    }
  }
  return DeclareParams<A>(kb, unused).As<Params>();
}

// Ragged mode: the sequence owning `row`, by binary search over query_start
// (uniform across the CTA, so the branch does not diverge).
Reg FindSeq(KernelBuilder& kb, const Params& p, Reg row) {
  const Reg lo = kb.Mov(Type::kU32, 0);
  const Reg hi = kb.Mov(Type::kU32, p.num_seqs);
  const ptx::Label top = kb.NewLabel("bsearch");
  const ptx::Label done = kb.NewLabel("bsearch_done");
  kb.Bind(top);
  const Reg width = kb.Emit(Op::kSub, Type::kU32, {hi, lo});
  kb.BraIf(kb.Setp(Cmp::kLe, Type::kU32, width, 1), done);
  const Reg mid = kb.Emit(Op::kAdd, Type::kU32, {lo, kb.Emit(Op::kShr, Type::kU32, {width, 1})});
  const Reg start =
      kb.Ld1(Space::kGlobal, Type::kS32, Operand::Addr(gen::AddrAdd(kb, p.query_start, mid, 4)));
  const Reg le = kb.Setp(Cmp::kLe, Type::kS32, start, row);
  kb.EmitTo(lo, Op::kSelp, Type::kB32, {mid, lo, le});
  kb.EmitTo(hi, Op::kSelp, Type::kB32, {hi, mid, le});
  kb.Bra(top);
  kb.Bind(done);
  return lo;
}

// One lane's slice of a K or V row, loaded in its stored form: NV vectors of VE elements,
// L * VE elements apart. Half types travel as b32 pairs, so widening them to f32 can wait
// until every load of a tile is issued.
struct RowLoad {
  std::vector<std::vector<Reg>> words;  // per vector: f32 elements, or b32 half pairs
  std::vector<Reg> widened;             // when a vector is too narrow for pairs: f32 already
};

RowLoad IssueRowLoad(KernelBuilder& kb, ElemType et, Reg addr, int nv, int lanes, int ve) {
  const int es = ElemSize(et);
  RowLoad r;
  for (int j = 0; j < nv; ++j) {
    const int64_t o = int64_t{j} * lanes * ve * es;
    if (es == 4) {
      r.words.push_back(kb.Ld(Space::kGlobal, Type::kF32, Operand::Addr(addr, o), ve, kReadOnly));
    } else if (ve % 2 == 0) {
      r.words.push_back(
          kb.Ld(Space::kGlobal, Type::kB32, Operand::Addr(addr, o), ve / 2, kReadOnly));
    } else {
      for (const Reg& f : gen::LoadAsF32(kb, et, addr, o, ve, ve * es, kReadOnly)) {
        r.widened.push_back(f);
      }
    }
  }
  return r;
}

// The f32 elements of a RowLoad, in the lane's element order.
std::vector<Reg> WidenRowLoad(KernelBuilder& kb, ElemType et, const RowLoad& r) {
  if (!r.widened.empty()) return r.widened;
  std::vector<Reg> out;
  for (const std::vector<Reg>& vec : r.words) {
    for (const Reg& w : vec) {
      if (ElemSize(et) == 4) {
        out.push_back(w);
        continue;
      }
      const Reg lo = kb.NewReg(Type::kF32), hi = kb.NewReg(Type::kF32);
      gen::WidenHalfPair(kb, et, w, lo, hi);
      out.push_back(lo);
      out.push_back(hi);
    }
  }
  return out;
}

// Splits of a row's head the merge reads per pass: their loads are issued together, so the
// merge waits out one load latency per kMergeUnroll splits, not one per split.
constexpr int kMergeUnroll = 4;

// Split mode, after the CTA's partial stores: count the CTA done in its group's counter;
// the CTA that completes the group merges the group's partials into `out` and resets the
// counter, and every other CTA leaves for `exit`. The merge takes the splits in order
// 0, 1, .. with an online rescale, whichever CTA runs it, so the output is deterministic;
// only its store to `out` rounds to out_dtype.
void MergeIfLast(KernelBuilder& kb, const DecodeAttentionConfig& cfg,
                 const DecodeAttentionShape& sh, const Params& p, Reg ml_base, Reg out_head0,
                 ptx::Label exit) {
  const int hd = cfg.head_dim;
  const Reg tid = kb.Special(SReg::kTidX);
  const Reg nsplit = kb.Special(SReg::kNctaidZ);
  const Reg group =
      kb.Emit(Op::kMadLo, Type::kU32,
              {kb.Special(SReg::kCtaidY), kb.Special(SReg::kNctaidX), kb.Special(SReg::kCtaidX)});
  const Reg counter = gen::AddrAdd(kb, p.split_counters, group, 4);
  // Release: every thread's partial stores are ordered before the count (the fence, then
  // the barrier, then one thread's atomic); the last CTA fences again before it reads.
  kb.MembarGl();
  kb.BarSync();  // also: the combine's shared reads are done before ml_base is reused
  const Reg tid0 = kb.Setp(Cmp::kEq, Type::kU32, tid, 0);
  {
    auto guard = kb.If(tid0);
    const Reg done = kb.Atom(Op::kAtomAdd, Space::kGlobal, Type::kU32, Operand::Addr(counter), 1);
    const Reg last = kb.Setp(Cmp::kEq, Type::kU32, gen::UAdd(kb, done, 1), nsplit);
    kb.St(Space::kShared, Type::kU32, Operand::Addr(ml_base), {kb.Selp(Type::kU32, 1, 0, last)});
  }
  kb.BarSync();
  const Reg last = kb.Ld1(Space::kShared, Type::kU32, Operand::Addr(ml_base));
  kb.BraIf(kb.Setp(Cmp::kEq, Type::kU32, last, 0), exit);  // uniform: the whole CTA leaves
  kb.MembarGl();
  {
    auto guard = kb.If(tid0);
    kb.Atom(Op::kAtomExch, Space::kGlobal, Type::kB32, Operand::Addr(counter), 0);
  }

  // Each thread merges 4 consecutive outputs of one head, as in the combine above.
  const int chunks = sh.heads_per_cta * hd / 4;
  const int threads = sh.num_warps * 32;
  const Reg last_split = kb.Emit(Op::kSub, Type::kU32, {nsplit, 1});
  for (int c0 = 0; c0 < chunks; c0 += threads) {
    const Reg cidx = gen::UAdd(kb, tid, c0);
    const Reg in_range = kb.Setp(Cmp::kLt, Type::kU32, cidx, chunks);
    const Reg cc = kb.Selp(Type::kU32, cidx, 0, in_range);
    const Reg head_row = gen::UAdd(kb, out_head0, gen::DivConst(kb, cc, hd / 4));
    const Reg d4 = gen::RemConst(kb, cc, hd / 4);
    const Reg hs0 = kb.Emit(Op::kMulLo, Type::kU32, {head_row, nsplit});
    const Reg lse_row = gen::AddrAdd(kb, p.partial_lse, hs0, 4);
    const Reg part_row =
        gen::AddrAdd(kb, gen::AddrAdd(kb, p.partial_out, hs0, int64_t{hd} * 4), d4, 16);
    const Reg mx = kb.Mov(Type::kF32, Operand::F32(kEmptyMax));
    const Reg sum = kb.Mov(Type::kF32, Operand::F32(0.0f));
    std::vector<Reg> o(4);
    for (Reg& r : o) r = kb.Mov(Type::kF32, Operand::F32(0.0f));
    const Reg s = kb.Mov(Type::kU32, 0);
    const ptx::Label loop = kb.NewLabel("merge_loop");
    kb.Bind(loop);
    {
      // Splits past the last read the last one's row and weigh nothing (lse -inf).
      std::vector<Reg> valid(kMergeUnroll), lse(kMergeUnroll);
      std::vector<std::vector<Reg>> part(kMergeUnroll);
      for (int u = 0; u < kMergeUnroll; ++u) {
        const Reg su = gen::UAdd(kb, s, u);
        valid[u] = kb.Setp(Cmp::kLe, Type::kU32, su, last_split);
        const Reg sc = kb.Emit(Op::kMin, Type::kU32, {su, last_split});
        lse[u] =
            kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, lse_row, sc, 4)));
        part[u] = kb.Ld(Space::kGlobal, Type::kF32,
                        Operand::Addr(gen::AddrAdd(kb, part_row, sc, int64_t{hd} * 4)), 4);
      }
      for (int u = 0; u < kMergeUnroll; ++u) {
        const Reg l = kb.Selp(Type::kF32, lse[u], Operand::F32(-INFINITY), valid[u]);
        const Reg mn = gen::FMax(kb, mx, l);
        const Reg c = kb.Emit(Op::kEx2, Type::kF32, {gen::FSub(kb, mx, mn)});
        const Reg w = kb.Emit(Op::kEx2, Type::kF32, {gen::FSub(kb, l, mn)});
        kb.EmitTo(sum, Op::kFma, Type::kF32, {sum, c, w});
        for (int i = 0; i < 4; ++i) {
          kb.EmitTo(o[i], Op::kFma, Type::kF32, {part[u][i], w, gen::FMul(kb, o[i], c)});
        }
        kb.MovTo(mx, mn);
      }
    }
    kb.EmitTo(s, Op::kAdd, Type::kU32, {s, kMergeUnroll});
    kb.BraIf(kb.Setp(Cmp::kLe, Type::kU32, s, last_split), loop);
    const Reg nonempty = kb.Setp(Cmp::kGt, Type::kF32, sum, Operand::F32(0.0f));
    const Reg inv =
        kb.Selp(Type::kF32, kb.Emit(Op::kRcp, Type::kF32, {sum}), Operand::F32(0.0f), nonempty);
    for (Reg& r : o) kb.EmitTo(r, Op::kMul, Type::kF32, {r, inv});
    const int os = ElemSize(cfg.out_dtype);
    const Reg dst =
        gen::AddrAdd(kb, gen::AddrAdd(kb, p.out, head_row, int64_t{hd} * os), d4, 4 * os);
    auto guard = kb.If(in_range);
    gen::StoreFromF32(kb, cfg.out_dtype, dst, 0, o, 4 * os);
  }
}

}  // namespace

absl::StatusOr<std::string> GenerateDecodeAttention(const DecodeAttentionConfig& cfg) {
  absl::StatusOr<DecodeAttentionShape> shape = ShapeOf(cfg);
  if (!shape.ok()) return shape.status();
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const DecodeAttentionShape& sh = *shape;
    const int hd = cfg.head_dim;
    const int es = ElemSize(cfg.kv_dtype);
    const int L = sh.lanes_per_token;
    const int E = sh.elems_per_lane;
    const int VE = sh.vec_elems;
    const int NV = E / VE;
    const int G = sh.heads_per_cta;
    const int W = sh.num_warps;
    const int TPW = sh.tokens_per_warp;
    const int U = sh.steps_per_tile;
    const int tokens_per_iter = W * TPW * U;

    kb.SetMaxThreads(W * 32);
    const Params p = LoadParams(kb, cfg);
    const ptx::Symbol s_acc = kb.Shared("acc", int64_t{W} * G * hd * 4);
    const ptx::Symbol s_ml = kb.Shared("ml", int64_t{W} * G * 8);

    const Reg tid = kb.Special(SReg::kTidX);
    const Reg lane = kb.Emit(Op::kAnd, Type::kB32, {tid, 31});
    const Reg warp = kb.Emit(Op::kShr, Type::kU32, {tid, 5});
    const Reg sg = kb.Emit(Op::kShr, Type::kU32, {lane, Log2(L)});
    const Reg sgl = kb.Emit(Op::kAnd, Type::kB32, {lane, L - 1});
    const Reg bx = kb.Special(SReg::kCtaidX);
    const Reg row = kb.Special(SReg::kCtaidY);
    const Reg split = kb.Special(SReg::kCtaidZ);
    const Reg nsplit = kb.Special(SReg::kNctaidZ);
    const ptx::Label exit = kb.NewLabel("exit");
    // Uniform per CTA: the whole CTA leaves together, before any barrier.
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, row, p.num_rows), exit);
    const Reg kvh = gen::DivConst(kb, bx, sh.head_chunks);
    const Reg chunk = gen::RemConst(kb, bx, sh.head_chunks);
    const Reg head0 = kb.Emit(Op::kMadLo, Type::kU32,
                              {kvh, sh.group, kb.Emit(Op::kMulLo, Type::kU32, {chunk, G})});

    // Context length and the sequence whose block table the row uses.
    Reg seq;
    Reg ctx;
    if (cfg.ragged) {
      seq = FindSeq(kb, p, row);
      const Reg pos =
          kb.Ld1(Space::kGlobal, Type::kS32, Operand::Addr(gen::AddrAdd(kb, p.positions, row, 4)));
      ctx = kb.Emit(Op::kAdd, Type::kS32, {pos, 1});
    } else {
      seq = row;
      ctx = kb.Ld1(Space::kGlobal, Type::kS32, Operand::Addr(gen::AddrAdd(kb, p.seq_lens, row, 4)));
    }
    ctx = kb.Emit(Op::kMax, Type::kS32, {ctx, 0});
    Reg start = kb.Mov(Type::kU32, 0);
    Reg end = ctx;
    if (cfg.split) {
      start = kb.Emit(Op::kMulLo, Type::kU32, {split, p.partition});
      end =
          kb.Emit(Op::kMin, Type::kU32, {ctx, kb.Emit(Op::kAdd, Type::kU32, {start, p.partition})});
    }
    const Reg has = kb.Setp(Cmp::kGt, Type::kU32, end, start);
    const Reg count = kb.Selp(Type::kU32, kb.Emit(Op::kSub, Type::kU32, {end, start}), 0, has);
    const Reg iters = gen::DivConst(kb, gen::UAdd(kb, count, tokens_per_iter - 1), tokens_per_iter);

    // q slice of this lane, pre-scaled into the base-2 domain.
    const Reg qscale = gen::FMul(kb, p.scale, Operand::F32(kLog2e));
    const Reg q_row = gen::AddrAdd(
        kb, p.q, kb.Emit(Op::kMadLo, Type::kU32, {row, cfg.num_heads, head0}), int64_t{hd} * 4);
    const Reg q_lane = gen::AddrAdd(kb, q_row, sgl, int64_t{VE} * 4);
    std::vector<std::vector<Reg>> q(G), acc(G);
    std::vector<Reg> m(G), l(G);
    for (int g = 0; g < G; ++g) {
      for (int j = 0; j < NV; ++j) {
        const int64_t off = (int64_t{g} * hd + int64_t{j} * L * VE) * 4;
        for (const Reg& r : gen::LoadAsF32(kb, ElemType::kF32, q_lane, off, VE, 16)) {
          q[g].push_back(gen::FMul(kb, r, qscale));
        }
      }
      for (int e = 0; e < E; ++e) acc[g].push_back(kb.Mov(Type::kF32, Operand::F32(0.0f)));
      m[g] = kb.Mov(Type::kF32, Operand::F32(kEmptyMax));
      l[g] = kb.Mov(Type::kF32, Operand::F32(0.0f));
    }

    // Token loop. Each iteration a warp takes a tile of U steps of tokens_per_warp
    // consecutive tokens: it issues every K and V load of the tile before widening any (so
    // they are in flight together), then loads the next tile's block numbers, which arrive
    // while it computes. Out-of-range tokens read the first token's row instead and are
    // masked, so every load stays inside the sequence's blocks.
    const Reg bt_row =
        gen::AddrAdd(kb, p.block_tables, kb.Emit(Op::kMulLo, Type::kU32, {seq, p.max_blocks}), 4);
    const Reg head_in_block = kb.Emit(Op::kMulLo, Type::kU32, {kvh, cfg.block_size});
    const Reg t = kb.Emit(Op::kAdd, Type::kU32,
                          {start, kb.Emit(Op::kMadLo, Type::kU32, {warp, TPW * U, sg})});
    const Reg it = kb.Mov(Type::kU32, 0);
    // Step u's token of the tile starting `ahead` tokens after this lane's current one:
    // whether it is in range, and the token whose row is read.
    auto step_token = [&](int64_t ahead) -> std::pair<Reg, Reg> {
      const Reg tok = gen::UAdd(kb, t, ahead);
      const Reg valid = kb.Setp(Cmp::kLt, Type::kU32, tok, end);
      return {valid, kb.Selp(Type::kU32, tok, start, valid)};
    };
    auto block_entry = [&](Reg tok) {
      return Operand::Addr(gen::AddrAdd(kb, bt_row, gen::DivConst(kb, tok, cfg.block_size), 4));
    };
    const ptx::Label loop = kb.NewLabel("token_loop");
    const ptx::Label loop_end = kb.NewLabel("token_loop_end");
    kb.BraIf(kb.Setp(Cmp::kEq, Type::kU32, iters, 0), loop_end);
    std::vector<Reg> block(U);
    for (int u = 0; u < U; ++u) {
      block[u] = kb.Ld1(Space::kGlobal, Type::kS32,
                        block_entry(step_token(int64_t{u} * TPW).second), kReadOnly);
    }
    kb.Bind(loop);
    {
      std::vector<Reg> valid(U), ka(U), va(U);
      for (int u = 0; u < U; ++u) {
        const auto [ok, tc] = step_token(int64_t{u} * TPW);
        valid[u] = ok;
        // Row (block, kvh, off) starts at element (block * kv_heads + kvh) * bs + off, times hd.
        const Reg row_in_block =
            gen::UAdd(kb, head_in_block, gen::RemConst(kb, tc, cfg.block_size));
        const Reg elem = kb.Emit(Op::kMulWide, Type::kU32,
                                 {block[u], int64_t{cfg.num_kv_heads} * cfg.block_size * hd});
        const Reg elem2 = kb.Emit(Op::kMadWide, Type::kU32, {row_in_block, hd, elem});
        const Reg lane_elem = kb.Emit(Op::kMadWide, Type::kU32, {sgl, VE, elem2});
        const Reg byte = kb.Emit(Op::kMulLo, Type::kU64, {lane_elem, es});
        ka[u] = kb.Emit(Op::kAdd, Type::kU64, {p.k_pool, byte});
        va[u] = kb.Emit(Op::kAdd, Type::kU64, {p.v_pool, byte});
      }
      std::vector<RowLoad> kraw(U), vraw(U);
      for (int u = 0; u < U; ++u) kraw[u] = IssueRowLoad(kb, cfg.kv_dtype, ka[u], NV, L, VE);
      for (int u = 0; u < U; ++u) vraw[u] = IssueRowLoad(kb, cfg.kv_dtype, va[u], NV, L, VE);
      for (int u = 0; u < U; ++u) {
        kb.LdTo(Space::kGlobal, Type::kS32,
                block_entry(step_token(int64_t{tokens_per_iter} + int64_t{u} * TPW).second),
                {block[u]}, kReadOnly);
      }
      std::vector<std::vector<Reg>> kf(U), vf(U);
      for (int u = 0; u < U; ++u) kf[u] = WidenRowLoad(kb, cfg.kv_dtype, kraw[u]);
      for (int u = 0; u < U; ++u) vf[u] = WidenRowLoad(kb, cfg.kv_dtype, vraw[u]);
      // Online softmax a tile at a time: one rescale of the running sums per tile.
      for (int g = 0; g < G; ++g) {
        std::vector<Reg> s(U);
        Reg mn = m[g];
        for (int u = 0; u < U; ++u) {
          Reg d = gen::FMul(kb, q[g][0], kf[u][0]);
          for (int e = 1; e < E; ++e) d = gen::FFma(kb, q[g][e], kf[u][e], d);
          d = gen::WarpAllReduce(kb, d, gen::Reduce::kSum, L);
          s[u] = kb.Selp(Type::kF32, d, Operand::F32(-INFINITY), valid[u]);
          mn = gen::FMax(kb, mn, s[u]);
        }
        const Reg c = kb.Emit(Op::kEx2, Type::kF32, {gen::FSub(kb, m[g], mn)});
        kb.EmitTo(l[g], Op::kMul, Type::kF32, {l[g], c});
        for (int e = 0; e < E; ++e) kb.EmitTo(acc[g][e], Op::kMul, Type::kF32, {acc[g][e], c});
        for (int u = 0; u < U; ++u) {
          const Reg pr = kb.Emit(Op::kEx2, Type::kF32, {gen::FSub(kb, s[u], mn)});
          kb.EmitTo(l[g], Op::kAdd, Type::kF32, {l[g], pr});
          for (int e = 0; e < E; ++e) {
            kb.EmitTo(acc[g][e], Op::kFma, Type::kF32, {pr, vf[u][e], acc[g][e]});
          }
        }
        kb.MovTo(m[g], mn);
      }
    }
    kb.EmitTo(t, Op::kAdd, Type::kU32, {t, tokens_per_iter});
    kb.EmitTo(it, Op::kAdd, Type::kU32, {it, 1});
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, it, iters), loop);
    kb.Bind(loop_end);

    // Merge the sub-groups of a warp (butterfly: every sub-group ends with the result).
    for (int offset = L; offset < 32; offset *= 2) {
      for (int g = 0; g < G; ++g) {
        const Reg mo = kb.Shfl(ptx::ShflMode::kBfly, m[g], offset);
        const Reg lo = kb.Shfl(ptx::ShflMode::kBfly, l[g], offset);
        const Reg mn = gen::FMax(kb, m[g], mo);
        const Reg a = kb.Emit(Op::kEx2, Type::kF32, {gen::FSub(kb, m[g], mn)});
        const Reg b = kb.Emit(Op::kEx2, Type::kF32, {gen::FSub(kb, mo, mn)});
        kb.EmitTo(l[g], Op::kFma, Type::kF32, {l[g], a, gen::FMul(kb, lo, b)});
        kb.MovTo(m[g], mn);
        for (int e = 0; e < E; ++e) {
          const Reg ao = kb.Shfl(ptx::ShflMode::kBfly, acc[g][e], offset);
          kb.EmitTo(acc[g][e], Op::kFma, Type::kF32, {acc[g][e], a, gen::FMul(kb, ao, b)});
        }
      }
    }

    // Per-warp results to shared memory: acc [W][G][hd], then (max, sum) [W][G].
    const Reg acc_base = kb.AddressOf(s_acc);
    const Reg ml_base = kb.AddressOf(s_ml);
    {
      const Reg first_sg = kb.Setp(Cmp::kEq, Type::kU32, sg, 0);
      const Reg wa = kb.Emit(Op::kMadLo, Type::kU32, {warp, G * hd * 4, acc_base});
      const Reg la = kb.Emit(Op::kMadLo, Type::kU32, {sgl, VE * 4, wa});
      auto guard = kb.If(first_sg);
      for (int g = 0; g < G; ++g) {
        for (int j = 0; j < NV; ++j) {
          for (int e0 = 0; e0 < VE; e0 += 4) {
            const int n = std::min(4, VE);
            const int64_t off = (int64_t{g} * hd + int64_t{j} * L * VE + e0) * 4;
            std::vector<Reg> vals(acc[g].begin() + j * VE + e0, acc[g].begin() + j * VE + e0 + n);
            if (n == 4) {
              kb.St(Space::kShared, Type::kF32, Operand::Addr(la, off), vals);
            } else {
              for (int i = 0; i < n; ++i) {
                kb.St(Space::kShared, Type::kF32, Operand::Addr(la, off + 4 * i), {vals[i]});
              }
            }
          }
        }
      }
    }
    {
      const Reg lane0 = kb.Setp(Cmp::kEq, Type::kU32, lane, 0);
      const Reg wm = kb.Emit(Op::kMadLo, Type::kU32, {warp, G * 8, ml_base});
      auto guard = kb.If(lane0);
      for (int g = 0; g < G; ++g) {
        kb.St(Space::kShared, Type::kF32, Operand::Addr(wm, g * 8), {m[g], l[g]});
      }
    }
    kb.BarSync();

    // Final combine: each thread owns 4 consecutive outputs of one head.
    const int chunks = G * hd / 4;
    const int threads = W * 32;
    const Reg out_head0 = kb.Emit(Op::kMadLo, Type::kU32, {row, cfg.num_heads, head0});
    for (int c0 = 0; c0 < chunks; c0 += threads) {
      const Reg cidx = gen::UAdd(kb, tid, c0);
      const Reg in_range = kb.Setp(Cmp::kLt, Type::kU32, cidx, chunks);
      const Reg cc = kb.Selp(Type::kU32, cidx, 0, in_range);
      const Reg g = gen::DivConst(kb, cc, hd / 4);
      const Reg d4 = gen::RemConst(kb, cc, hd / 4);
      const Reg gm = kb.Emit(Op::kMadLo, Type::kU32, {g, 8, ml_base});
      std::vector<Reg> mw(W), lw(W);
      Reg mx;
      for (int w = 0; w < W; ++w) {
        const std::vector<Reg> ml =
            kb.Ld(Space::kShared, Type::kF32, Operand::Addr(gm, int64_t{w} * G * 8), 2);
        mw[w] = ml[0];
        lw[w] = ml[1];
        mx = w == 0 ? mw[0] : gen::FMax(kb, mx, mw[w]);
      }
      const Reg ga = kb.Emit(Op::kMadLo, Type::kU32, {g, hd * 4, acc_base});
      const Reg ea = kb.Emit(Op::kMadLo, Type::kU32, {d4, 16, ga});
      Reg sum = kb.Mov(Type::kF32, Operand::F32(0.0f));
      std::vector<Reg> o(4);
      for (int i = 0; i < 4; ++i) o[i] = kb.Mov(Type::kF32, Operand::F32(0.0f));
      for (int w = 0; w < W; ++w) {
        const Reg a = kb.Emit(Op::kEx2, Type::kF32, {gen::FSub(kb, mw[w], mx)});
        kb.EmitTo(sum, Op::kFma, Type::kF32, {lw[w], a, sum});
        const std::vector<Reg> v =
            kb.Ld(Space::kShared, Type::kF32, Operand::Addr(ea, int64_t{w} * G * hd * 4), 4);
        for (int i = 0; i < 4; ++i) kb.EmitTo(o[i], Op::kFma, Type::kF32, {v[i], a, o[i]});
      }
      const Reg nonempty = kb.Setp(Cmp::kGt, Type::kF32, sum, Operand::F32(0.0f));
      const Reg inv =
          kb.Selp(Type::kF32, kb.Emit(Op::kRcp, Type::kF32, {sum}), Operand::F32(0.0f), nonempty);
      for (int i = 0; i < 4; ++i) kb.EmitTo(o[i], Op::kMul, Type::kF32, {o[i], inv});
      const Reg head_row = gen::UAdd(kb, out_head0, g);  // row * num_heads + head
      // Split: the partials stay f32 for the merge, which rounds to out_dtype when it stores.
      Reg dst;
      ElemType dst_dtype = ElemType::kF32;
      if (cfg.split) {
        const Reg hs = kb.Emit(Op::kMadLo, Type::kU32, {head_row, nsplit, split});
        dst = gen::AddrAdd(kb, p.partial_out, hs, int64_t{hd} * 4);
        const Reg lse = kb.Selp(Type::kF32, gen::FAdd(kb, mx, kb.Emit(Op::kLg2, Type::kF32, {sum})),
                                Operand::F32(-INFINITY), nonempty);
        const Reg first =
            kb.Emit(Op::kAnd, Type::kPred, {in_range, kb.Setp(Cmp::kEq, Type::kU32, d4, 0)});
        const Reg la = gen::AddrAdd(kb, p.partial_lse, hs, 4);
        auto guard = kb.If(first);
        kb.St(Space::kGlobal, Type::kF32, Operand::Addr(la), {lse});
      } else {
        dst_dtype = cfg.out_dtype;
        dst = gen::AddrAdd(kb, p.out, head_row, int64_t{hd} * ElemSize(dst_dtype));
      }
      const int os = ElemSize(dst_dtype);
      const Reg da = gen::AddrAdd(kb, dst, d4, 4 * os);
      auto guard = kb.If(in_range);
      gen::StoreFromF32(kb, dst_dtype, da, 0, o, 4 * os);
    }
    if (cfg.split) MergeIfLast(kb, cfg, sh, p, ml_base, out_head0, exit);
    kb.Bind(exit);
    kb.Ret();
    return absl::StrCat("lanes/token ", L, ", elems/lane ", E, ", vector ", VE, ", heads/CTA ", G,
                        ", warps ", W, ", steps/tile ", U);
  });
}

}  // namespace ptxserve::kernels
