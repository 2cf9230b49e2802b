// PTX of flash attention (contract and work split in flash_attention.h).
//
// Each warp holds its 16 query rows as mma A fragments for the whole kernel (q read once
// from f32, pre-scaled by scale*log2 e into the base-2 domain and rounded to the KV type),
// and its 16 x head_dim output tile as f32 accumulators. The CTA walks the keys
// [0, max position of its tile] in tiles of KeysPerTile() keys: cp.async copies the K and
// V rows (16-byte chunks, through the block table; zero-filled past the end) into one of
// two shared stages while the other is multiplied, one barrier a tile (after it the tile
// has landed and every warp is done with the stage the next copy overwrites). Per tile a
// warp computes S = Q K^T (ldmatrix of K rows as the col-major B operand), masks keys past
// each row's position, folds S into an online softmax (row max and sum over the four
// lanes sharing a row), and adds P V, P's accumulators repacked in place as the A operand
// and V read with ldmatrix.trans. Shared rows are head_dim halves plus 16 bytes: an odd
// number of 16-byte units, so the eight rows of each 8x8 ldmatrix fall in distinct bank
// groups, and a quarter-warp of cp.async chunks writes 128 contiguous bytes.
//
// Rows past the tile (partial tiles, or a group that does not divide 64) take position -1,
// so every key is masked for them; they run every mma and barrier like the others and
// store nothing.
#include <array>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/flash_attention.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
// Initial running max: finite, so max - max of two "empty" states is 0, not NaN.
constexpr float kEmptyMax = -1e30f;
constexpr int kWarps = 4;

// The registers of FlashAttentionArgs, in .param order.
struct Params {
  Reg q, k_pool, v_pool, block_tables, query_start, positions, out;
  Reg max_blocks, num_seqs, num_rows, scale;
};

// The sequence owning tile window `cta` (grid x): the last s with
// query_start[s] / T + s <= cta, by binary search (uniform across the CTA).
Reg FindSeq(KernelBuilder& kb, const Params& p, Reg cta, int tokens_per_cta) {
  const Reg lo = kb.Mov(Type::kU32, 0);
  const Reg hi = kb.Mov(Type::kU32, p.num_seqs);
  const ptx::Label top = kb.NewLabel("bsearch");
  const ptx::Label done = kb.NewLabel("bsearch_done");
  kb.Bind(top);
  const Reg width = kb.Emit(Op::kSub, Type::kU32, {hi, lo});
  kb.BraIf(kb.Setp(Cmp::kLe, Type::kU32, width, 1), done);
  const Reg mid = kb.Emit(Op::kAdd, Type::kU32, {lo, kb.Emit(Op::kShr, Type::kU32, {width, 1})});
  const Reg start =
      kb.Ld1(Space::kGlobal, Type::kU32, Operand::Addr(gen::AddrAdd(kb, p.query_start, mid, 4)));
  const Reg first_cta = gen::UAdd(kb, gen::DivConst(kb, start, tokens_per_cta), mid);
  const Reg le = kb.Setp(Cmp::kLe, Type::kU32, first_cta, cta);
  kb.EmitTo(lo, Op::kSelp, Type::kB32, {mid, lo, le});
  kb.EmitTo(hi, Op::kSelp, Type::kB32, {hi, mid, le});
  kb.Bra(top);
  kb.Bind(done);
  return lo;
}

// s32 maximum over the warp (every lane gets it).
Reg WarpMaxS32(KernelBuilder& kb, Reg v) {
  for (int off = 16; off >= 1; off /= 2) {
    v = kb.Emit(Op::kMax, Type::kS32, {v, kb.Shfl(ptx::ShflMode::kBfly, v, off)});
  }
  return v;
}

// f32 reduction over the four lanes that share an accumulator row (lane % 4).
Reg QuadReduce(KernelBuilder& kb, Reg v, bool max) {
  for (int off = 1; off <= 2; off *= 2) {
    const Reg o = kb.Shfl(ptx::ShflMode::kBfly, v, off);
    v = max ? gen::FMax(kb, v, o) : gen::FAdd(kb, v, o);
  }
  return v;
}

}  // namespace

absl::StatusOr<std::string> GenerateFlashAttention(const FlashAttentionConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const int hd = cfg.head_dim;
    const int group = cfg.num_heads / cfg.num_kv_heads;
    const int T = cfg.TokensPerCta();
    const int bc = cfg.KeysPerTile();
    const int row_bytes = hd * 2 + 16;
    const int tile_bytes = bc * row_bytes;
    const int stage_bytes = 2 * tile_bytes;  // K tile, then V tile
    const Type half = cfg.kv_dtype == ElemType::kF16 ? Type::kF16 : Type::kBF16;
    const Type half2 = cfg.kv_dtype == ElemType::kF16 ? Type::kF16x2 : Type::kBF16x2;

    const Params p = DeclareParams<FlashAttentionArgs>(kb).As<Params>();
    const Reg smem = kb.AddressOf(kb.Shared("kv", int64_t{2} * stage_bytes));
    const Reg tid = kb.Special(SReg::kTidX);
    const Reg lane = kb.Special(SReg::kLaneId);
    const Reg warp = kb.Emit(Op::kShr, Type::kU32, {tid, 5});
    const Reg cta = kb.Special(SReg::kCtaidX);
    const Reg kvh = kb.Special(SReg::kCtaidY);
    const ptx::Label exit = kb.NewLabel("exit");

    // The tile: rows [row0, row_end) of sequence `seq`; empty between sequences, where the
    // whole CTA leaves before any barrier.
    const Reg seq = FindSeq(kb, p, cta, T);
    const Reg qs = gen::AddrAdd(kb, p.query_start, seq, 4);
    const Reg seq_begin = kb.Ld1(Space::kGlobal, Type::kU32, Operand::Addr(qs));
    const Reg seq_end = kb.Ld1(Space::kGlobal, Type::kU32, Operand::Addr(qs, 4));
    const Reg window =
        kb.Emit(Op::kMulLo, Type::kU32, {kb.Emit(Op::kSub, Type::kU32, {cta, seq}), T});
    const Reg row0 = kb.Emit(Op::kMax, Type::kU32, {seq_begin, window});
    // Rows past num_rows (a query_start past the step's rows) are never touched.
    const Reg row_end =
        kb.Emit(Op::kMin, Type::kU32,
                {kb.Emit(Op::kMin, Type::kU32, {seq_end, p.num_rows}), gen::UAdd(kb, window, T)});
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, row0, row_end), exit);
    const Reg ntok = kb.Emit(Op::kSub, Type::kU32, {row_end, row0});

    // Keys [0, kend): up to the tile's latest position (every warp finds it itself).
    Reg pmax = kb.Mov(Type::kS32, -1);
    for (int i = 0; i * 32 < T; ++i) {
      const Reg tok = gen::UAdd(kb, lane, 32 * i);
      const Reg v = kb.Mov(Type::kS32, -1);
      {
        auto guard = kb.If(kb.Setp(Cmp::kLt, Type::kU32, tok, ntok));
        kb.LdTo(Space::kGlobal, Type::kS32,
                Operand::Addr(gen::AddrAdd(kb, p.positions, gen::UAdd(kb, row0, tok), 4)), {v});
      }
      pmax = kb.Emit(Op::kMax, Type::kS32, {pmax, v});
    }
    const Reg kend = gen::UAdd(kb, WarpMaxS32(kb, pmax), 1);

    // This lane's two accumulator rows h = 0, 1: warp row g + 8h, a (token, head) pair.
    const Reg g = kb.Emit(Op::kShr, Type::kU32, {lane, 2});
    const Reg t = kb.Emit(Op::kAnd, Type::kB32, {lane, 3});
    const Reg t2 = kb.Emit(Op::kShl, Type::kB32, {t, 1});
    const Reg head_base = kb.Emit(Op::kMulLo, Type::kU32, {kvh, group});
    std::array<Reg, 2> valid, pos, q_at, out_at;
    for (int h = 0; h < 2; ++h) {
      const Reg r = kb.Emit(Op::kMadLo, Type::kU32, {warp, 16, gen::UAdd(kb, g, 8 * h)});
      const Reg tok = gen::DivConst(kb, r, group);
      const Reg head = gen::UAdd(kb, head_base, gen::RemConst(kb, r, group));
      valid[h] = kb.Setp(Cmp::kLt, Type::kU32, tok, ntok);
      const Reg grow = kb.Selp(Type::kU32, gen::UAdd(kb, row0, tok), row0, valid[h]);
      pos[h] = kb.Mov(Type::kS32, -1);
      {
        auto guard = kb.If(valid[h]);
        kb.LdTo(Space::kGlobal, Type::kS32, Operand::Addr(gen::AddrAdd(kb, p.positions, grow, 4)),
                {pos[h]});
      }
      // Element (row, head, 2t) of q and out.
      const Reg elem =
          kb.Emit(Op::kMadLo, Type::kU32,
                  {kb.Emit(Op::kMadLo, Type::kU32, {grow, cfg.num_heads, head}), hd, t2});
      q_at[h] = gen::AddrAdd(kb, p.q, elem, 4);
      out_at[h] = gen::AddrAdd(kb, p.out, elem, ElemSize(cfg.out_dtype));
    }

    // q as A fragments: per 16-wide k step, (row g, k 2t), (row g + 8, k 2t), (row g, k 8 + 2t),
    // (row g + 8, k 8 + 2t), each a pair.
    const Reg qscale = gen::FMul(kb, p.scale, Operand::F32(kLog2e));
    std::vector<std::vector<Reg>> qa(hd / 16);
    for (int kk = 0; kk < hd / 16; ++kk) {
      for (int c = 0; c < 2; ++c) {
        for (int h = 0; h < 2; ++h) {
          const std::vector<Reg> x = {kb.Mov(Type::kF32, Operand::F32(0.0f)),
                                      kb.Mov(Type::kF32, Operand::F32(0.0f))};
          {
            auto guard = kb.If(valid[h]);
            kb.LdTo(Space::kGlobal, Type::kF32, Operand::Addr(q_at[h], (kk * 16 + c * 8) * 4), x);
          }
          qa[kk].push_back(
              kb.CvtPack(half2, gen::FMul(kb, x[1], qscale), gen::FMul(kb, x[0], qscale)));
        }
      }
    }

    // Loader roles: 16-byte chunk c = tid + 128 i of a tile is key c / (hd / 8), bytes
    // 16 (c % (hd / 8)) of its row; the same chunk of K and of V.
    const int chunks_per_row = hd / 8;
    const int rounds = bc * chunks_per_row / 128;
    std::vector<Reg> chunk_key(rounds), chunk_dst(rounds), chunk_byte(rounds);
    for (int i = 0; i < rounds; ++i) {
      const Reg c = gen::UAdd(kb, tid, 128 * i);
      chunk_key[i] = gen::DivConst(kb, c, chunks_per_row);
      chunk_byte[i] = kb.Emit(Op::kShl, Type::kB32, {gen::RemConst(kb, c, chunks_per_row), 4});
      chunk_dst[i] = kb.Emit(Op::kMadLo, Type::kU32,
                             {chunk_key[i], row_bytes, gen::UAdd(kb, chunk_byte[i], smem)});
    }
    const Reg bt_row =
        gen::AddrAdd(kb, p.block_tables, kb.Emit(Op::kMulLo, Type::kU32, {seq, p.max_blocks}), 4);
    const Reg head_in_block = kb.Emit(Op::kMulLo, Type::kU32, {kvh, cfg.block_size});
    // Copies keys [k0, k0 + bc) into `stage`, zeros past kend.
    auto copy_tile = [&](Reg k0, Reg stage) {
      const Reg stage_off = kb.Emit(Op::kMulLo, Type::kU32, {stage, stage_bytes});
      for (int i = 0; i < rounds; ++i) {
        const Reg key = gen::UAdd(kb, k0, chunk_key[i]);
        const Reg ok = kb.Setp(Cmp::kLt, Type::kU32, key, kend);
        const Reg kc = kb.Selp(Type::kU32, key, 0, ok);
        const Reg block = kb.Ld1(
            Space::kGlobal, Type::kU32,
            Operand::Addr(gen::AddrAdd(kb, bt_row, gen::DivConst(kb, kc, cfg.block_size), 4)),
            ptx::CacheOp::kNonCoherent);
        // Row (block, kvh, offset) starts at element ((block * kv_heads + kvh) * bs + offset) hd.
        const Reg elem = kb.Emit(Op::kMulWide, Type::kU32,
                                 {block, int64_t{cfg.num_kv_heads} * cfg.block_size * hd});
        const Reg row_elem = kb.Emit(
            Op::kMadWide, Type::kU32,
            {gen::UAdd(kb, head_in_block, gen::RemConst(kb, kc, cfg.block_size)), hd, elem});
        const Reg byte = kb.Emit(Op::kMadWide, Type::kU32,
                                 {chunk_byte[i], 1, kb.Emit(Op::kShl, Type::kB64, {row_elem, 1})});
        const Reg dst = gen::UAdd(kb, chunk_dst[i], stage_off);
        const Reg size = kb.Selp(Type::kU32, 16, 0, ok);
        kb.CpAsync(ptx::CpAsyncCache::kCg, Operand::Addr(dst),
                   Operand::Addr(kb.Emit(Op::kAdd, Type::kU64, {p.k_pool, byte})), 16, size);
        kb.CpAsync(ptx::CpAsyncCache::kCg, Operand::Addr(dst, tile_bytes),
                   Operand::Addr(kb.Emit(Op::kAdd, Type::kU64, {p.v_pool, byte})), 16, size);
      }
      kb.CpAsyncCommit();
    };

    // ldmatrix row addresses. K (x4, B of S = Q K^T): lane l gives key 8 (l / 16) + l % 8 at
    // head element 8 ((l / 8) % 2): matrices 0, 1 are the b fragment of one 8-key tile, 2, 3
    // of the next. V (x4 .trans, B of P V): lane l gives key 8 ((l / 8) % 2) + l % 8 at head
    // element 8 (l / 16): matrices 0, 1 are the b fragment of one 8-wide head slice, 2, 3 of
    // the next.
    const Reg l7 = kb.Emit(Op::kAnd, Type::kB32, {lane, 7});
    const Reg l8 = kb.Emit(Op::kAnd, Type::kB32, {kb.Emit(Op::kShr, Type::kU32, {lane, 3}), 1});
    const Reg l16 = kb.Emit(Op::kShr, Type::kU32, {lane, 4});
    const Reg k_rd = kb.Emit(Op::kMadLo, Type::kU32,
                             {kb.Emit(Op::kMadLo, Type::kU32, {l16, 8, l7}), row_bytes,
                              kb.Emit(Op::kMadLo, Type::kU32, {l8, 16, smem})});
    const Reg v_rd =
        kb.Emit(Op::kMadLo, Type::kU32,
                {kb.Emit(Op::kMadLo, Type::kU32, {l8, 8, l7}), row_bytes,
                 kb.Emit(Op::kMadLo, Type::kU32, {l16, 16, gen::UAdd(kb, smem, tile_bytes)})});

    // Loop-carried state: output accumulators o[n8 slice][4], running max and sum per row.
    std::vector<std::vector<Reg>> o(hd / 8);
    for (auto& v : o) {
      for (int e = 0; e < 4; ++e) v.push_back(kb.Mov(Type::kF32, Operand::F32(0.0f)));
    }
    std::array<Reg, 2> m, l;
    for (int h = 0; h < 2; ++h) {
      m[h] = kb.Mov(Type::kF32, Operand::F32(kEmptyMax));
      l[h] = kb.Mov(Type::kF32, Operand::F32(0.0f));
    }
    std::vector<std::vector<Reg>> s(bc / 8);
    for (auto& v : s) {
      for (int e = 0; e < 4; ++e) v.push_back(kb.NewReg(Type::kF32));
    }

    // A warp none of whose rows sees a key of the tile (a causal tile past its rows, or rows
    // past the tile: a decode row leaves three of four warps idle at group 4) skips its
    // arithmetic, a uniform branch; it still copies its share and reaches every barrier.
    const Reg warp_pmax = WarpMaxS32(kb, kb.Emit(Op::kMax, Type::kS32, {pos[0], pos[1]}));
    const Reg k0 = kb.Mov(Type::kU32, 0);
    const Reg stage = kb.Mov(Type::kU32, 0);
    copy_tile(k0, stage);
    const ptx::Label loop = kb.NewLabel("key_loop");
    const ptx::Label skip = kb.NewLabel("tile_done");
    kb.Bind(loop);
    {
      kb.CpAsyncWait(0);
      kb.BarSync();
      const Reg next_stage = kb.Emit(Op::kXor, Type::kB32, {stage, 1});
      const Reg next_k0 = gen::UAdd(kb, k0, bc);
      copy_tile(next_k0, next_stage);
      kb.BraIf(kb.Setp(Cmp::kLt, Type::kS32, warp_pmax, k0), skip);
      const Reg stage_off = kb.Emit(Op::kMulLo, Type::kU32, {stage, stage_bytes});
      const Reg k_at = gen::UAdd(kb, k_rd, stage_off);
      const Reg v_at = gen::UAdd(kb, v_rd, stage_off);

      // S = Q K^T.
      for (auto& v : s) {
        for (Reg r : v) kb.MovTo(r, Operand::F32(0.0f));
      }
      for (int kk = 0; kk < hd / 16; ++kk) {
        for (int j = 0; j < bc / 16; ++j) {
          const std::vector<Reg> b =
              kb.Ldmatrix(4, false, Operand::Addr(k_at, int64_t{j} * 16 * row_bytes + kk * 32));
          kb.MmaTo(s[2 * j], ptx::MmaShape::kM16N8K16, half, qa[kk], {b[0], b[1]}, s[2 * j]);
          kb.MmaTo(s[2 * j + 1], ptx::MmaShape::kM16N8K16, half, qa[kk], {b[2], b[3]},
                   s[2 * j + 1]);
        }
      }

      // Causal mask and online softmax; accumulator e holds row g + 8 (e / 2), key 2t + e % 2
      // of its 8-key tile.
      const Reg key0 = kb.Emit(Op::kAdd, Type::kU32, {k0, t2});
      for (int h = 0; h < 2; ++h) {
        Reg mx = m[h];
        for (int j = 0; j < bc / 8; ++j) {
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            const Reg key = gen::UAdd(kb, key0, 8 * j + e % 2);
            const Reg seen = kb.Setp(Cmp::kLe, Type::kS32, key, pos[h]);
            kb.EmitTo(s[j][e], Op::kSelp, Type::kF32, {s[j][e], Operand::F32(-INFINITY), seen});
            mx = gen::FMax(kb, mx, s[j][e]);
          }
        }
        mx = QuadReduce(kb, mx, /*max=*/true);
        const Reg c = kb.Emit(Op::kEx2, Type::kF32, {gen::FSub(kb, m[h], mx)});
        kb.MovTo(m[h], mx);
        Reg sum = kb.Mov(Type::kF32, Operand::F32(0.0f));
        for (int j = 0; j < bc / 8; ++j) {
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            kb.EmitTo(s[j][e], Op::kEx2, Type::kF32, {gen::FSub(kb, s[j][e], mx)});
            sum = gen::FAdd(kb, sum, s[j][e]);
          }
        }
        // The lane's share of the row sum; the four lanes of a row add theirs at the end.
        kb.EmitTo(l[h], Op::kFma, Type::kF32, {l[h], c, sum});
        for (auto& v : o) {
          for (int e = 2 * h; e < 2 * h + 2; ++e) kb.EmitTo(v[e], Op::kMul, Type::kF32, {v[e], c});
        }
      }

      // O += P V: the S accumulators of 8-key tiles 2j and 2j + 1 are P's A fragment for
      // the 16 keys of step j.
      for (int j = 0; j < bc / 16; ++j) {
        const std::vector<Reg> pa = {kb.CvtPack(half2, s[2 * j][1], s[2 * j][0]),
                                     kb.CvtPack(half2, s[2 * j][3], s[2 * j][2]),
                                     kb.CvtPack(half2, s[2 * j + 1][1], s[2 * j + 1][0]),
                                     kb.CvtPack(half2, s[2 * j + 1][3], s[2 * j + 1][2])};
        for (int d = 0; d < hd / 16; ++d) {
          const std::vector<Reg> b =
              kb.Ldmatrix(4, true, Operand::Addr(v_at, int64_t{j} * 16 * row_bytes + d * 32));
          kb.MmaTo(o[2 * d], ptx::MmaShape::kM16N8K16, half, pa, {b[0], b[1]}, o[2 * d]);
          kb.MmaTo(o[2 * d + 1], ptx::MmaShape::kM16N8K16, half, pa, {b[2], b[3]}, o[2 * d + 1]);
        }
      }
      kb.Bind(skip);
      kb.MovTo(stage, next_stage);
      kb.MovTo(k0, next_k0);
    }
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, k0, kend), loop);
    // The last copy (past kend, all zero-fill) must land before the CTA exits.
    kb.CpAsyncWait(0);

    // out = O / l, rows with no keys (past the tile) storing nothing.
    for (int h = 0; h < 2; ++h) {
      const Reg sum = QuadReduce(kb, l[h], /*max=*/false);
      const Reg nonempty = kb.Setp(Cmp::kGt, Type::kF32, sum, Operand::F32(0.0f));
      const Reg inv =
          kb.Selp(Type::kF32, kb.Emit(Op::kRcp, Type::kF32, {sum}), Operand::F32(0.0f), nonempty);
      std::vector<std::vector<Reg>> vals;
      for (auto& v : o)
        vals.push_back({gen::FMul(kb, v[2 * h], inv), gen::FMul(kb, v[2 * h + 1], inv)});
      auto guard = kb.If(valid[h]);
      for (int d = 0; d < hd / 8; ++d) {
        gen::StoreFromF32(kb, cfg.out_dtype, out_at[h], int64_t{d} * 8 * ElemSize(cfg.out_dtype),
                          vals[d], 2 * ElemSize(cfg.out_dtype));
      }
    }
    kb.Bind(exit);
    kb.Ret();
    return absl::StrCat("tensor cores: ", T, " tokens x ", group, " heads per CTA, ", bc,
                        "-key tiles, mma.m16n8k16 (", ElemTypeName(cfg.kv_dtype), ")");
  });
}

}  // namespace ptxserve::kernels
