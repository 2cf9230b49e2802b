// One CTA per token: the token's cos/sin are computed once into shared memory, then each thread
// takes units of four pairs of a q or k head (two 128-bit loads of the qkv row, rotated, stored as
// f32 into q or as the pool's type into the K pool) or of four elements of a v head (copied into
// the V pool), so the row is read once and every load is a 128-bit vector.
#include "kernels/rope_kv.h"

#include <algorithm>
#include <numbers>
#include <utility>
#include <vector>

#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

// 2*pi as C1 + C2 + C3: C1 has few significant bits, so k * C1 loses nothing in the fma.
constexpr double kTwoPi = 2.0 * std::numbers::pi;
constexpr float kC1 = 6.28125f;
const float kC2 = static_cast<float>(kTwoPi - kC1);
const float kC3 = static_cast<float>(kTwoPi - kC1 - static_cast<double>(kC2));

// The token's cos and sin of angle pos * inv_freq[i] for i < half, into shared memory at
// cs_base + 8 i as (cos, sin) f32, threads (tid of `threads`) striding over i. `pos` is the
// position as f32; the caller synchronises the CTA before reading them.
void RopeCosSin(KernelBuilder& kb, int half, int threads, Reg tid, Reg pos, Reg inv_freq,
                Reg cs_base) {
  // Threads stride over the frequencies (guarded, no early exit: the caller's barrier
  // must see every thread).
  for (int i0 = 0; i0 < half; i0 += threads) {
    const Reg i = gen::UAdd(kb, tid, i0);
    const Reg active = kb.Setp(Cmp::kLt, Type::kU32, i, half);
    auto g = kb.If(active);
    const Reg f =
        kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, inv_freq, i, 4)));
    const Reg hi = gen::FMul(kb, pos, f);
    const Reg lo = gen::FFma(kb, pos, f, kb.Emit(Op::kNeg, Type::kF32, {hi}));
    const Reg turns = gen::FMul(kb, hi, Operand::F32(static_cast<float>(1.0 / kTwoPi)));
    const Reg kk = kb.Cvt(Type::kF32, Type::kF32, turns, ptx::Round::kRni);
    const Reg nk = kb.Emit(Op::kNeg, Type::kF32, {kk});
    Reg r = gen::FFma(kb, nk, Operand::F32(kC1), hi);
    r = gen::FFma(kb, nk, Operand::F32(kC2), r);
    r = gen::FFma(kb, nk, Operand::F32(kC3), r);
    r = gen::FAdd(kb, r, lo);
    const Reg c = kb.Emit(Op::kCos, Type::kF32, {r});
    const Reg s = kb.Emit(Op::kSin, Type::kF32, {r});
    kb.St(Space::kShared, Type::kF32,
          Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {i, 8, cs_base})), {c, s});
  }
}

// The pair (a, b) rotated by the angle of (cos, sin).
std::pair<Reg, Reg> RopeRotate(KernelBuilder& kb, Reg a, Reg b, Reg cos, Reg sin) {
  // a' = a cos - b sin, b' = b cos + a sin (as the CPU reference rounds them).
  return {gen::FSub(kb, gen::FMul(kb, a, cos), gen::FMul(kb, b, sin)),
          gen::FAdd(kb, gen::FMul(kb, b, cos), gen::FMul(kb, a, sin))};
}

// The element index (u64) of (block, head 0, offset, 0) in a K or V pool for a token's
// non-negative `slot` (u64).
Reg PoolTokenElem(KernelBuilder& kb, Reg slot, int num_kv_heads, int block_size, int head_dim) {
  Reg block;
  Reg offset;
  if (IsPow2(block_size)) {
    block = kb.Emit(Op::kShr, Type::kU64, {slot, Log2(block_size)});
    offset = kb.Emit(Op::kAnd, Type::kB64, {slot, block_size - 1});
  } else {
    block = kb.Emit(Op::kDiv, Type::kU64, {slot, block_size});
    offset = kb.Emit(Op::kRem, Type::kU64, {slot, block_size});
  }
  const Reg dst_row = kb.Emit(Op::kMulLo, Type::kU64, {offset, head_dim});
  return kb.Emit(Op::kMadLo, Type::kU64,
                 {block, int64_t{num_kv_heads} * block_size * head_dim, dst_row});
}

}  // namespace

int RopeKvConfig::Threads() const {
  // One unit per thread where the CTA allows: a decode step has one CTA per token, so
  // every unit after the first a thread takes lengthens its latency-bound chain.
  return static_cast<int>(std::clamp<int64_t>(CeilDiv(Units(), 32) * 32, 32, 1024));
}

absl::StatusOr<std::string> GenerateRopeKv(const RopeKvConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const int hd = cfg.head_dim, half = hd / 2;
    const int threads = cfg.Threads();
    const int es = ElemSize(cfg.kv_dtype);
    const int64_t row = int64_t{cfg.num_heads + 2 * cfg.num_kv_heads} * hd;  // f32 per token
    const int64_t head_units = hd / 8;  // rotation units of a head
    const int64_t rotate_units = cfg.RotateUnits(), units = cfg.Units();
    const auto [qkv, q, positions, inv_freq, slots, k_pool, v_pool, num_tokens] =
        DeclareParams<RopeKvArgs>(kb);
    const ptx::Symbol cs = kb.Shared("cos_sin", int64_t{half} * 8);

    const auto [t, done] = gen::EnterRow(kb, num_tokens);
    const Reg tid = kb.Special(SReg::kTidX);
    const Reg pos_i =
        kb.Ld1(Space::kGlobal, Type::kS32, Operand::Addr(gen::AddrAdd(kb, positions, t, 4)));
    const Reg slot =
        kb.Ld1(Space::kGlobal, Type::kU64, Operand::Addr(gen::AddrAdd(kb, slots, t, 8)));
    const Reg pos = kb.Cvt(Type::kF32, Type::kS32, pos_i, ptx::Round::kRn);
    const Reg cs_base = kb.AddressOf(cs);
    RopeCosSin(kb, half, threads, tid, pos, inv_freq, cs_base);

    // A negative slot (padding) writes no K/V; its pool addresses are computed but unused.
    const Reg has_slot = kb.Setp(Cmp::kGe, Type::kS64, slot, 0);
    const Reg dst_tok = PoolTokenElem(kb, slot, cfg.num_kv_heads, cfg.block_size, cfg.head_dim);
    const Reg k_tok = gen::AddrAdd(kb, k_pool, dst_tok, es);
    const Reg v_tok = gen::AddrAdd(kb, v_pool, dst_tok, es);
    const Reg src_tok = gen::AddrAdd(kb, qkv, t, row * 4);
    const Reg q_tok = gen::AddrAdd(kb, q, t, int64_t{cfg.num_heads} * hd * 4);
    kb.BarSync();

    const Reg u = kb.Mov(Type::kU32, tid);
    const ptx::Label loop = kb.NewLabel("unit_loop");
    const ptx::Label copy_v = kb.NewLabel("copy_v");
    const ptx::Label next = kb.NewLabel("next_unit");
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, u, units), done);
    kb.Bind(loop);
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, u, rotate_units), copy_v);
    {
      // Head h of the row (q heads, then k heads) and its pairs p0 .. p0 + 3.
      const Reg h = gen::DivConst(kb, u, head_units);
      const Reg p0 = kb.Emit(Op::kShl, Type::kB32, {gen::RemConst(kb, u, head_units), 2});
      const Reg csa = kb.Emit(Op::kMadLo, Type::kU32, {p0, 8, cs_base});
      const std::vector<Reg> cs01 = kb.Ld(Space::kShared, Type::kF32, Operand::Addr(csa), 4);
      const std::vector<Reg> cs23 = kb.Ld(Space::kShared, Type::kF32, Operand::Addr(csa, 16), 4);
      const std::vector<Reg> cos = {cs01[0], cs01[2], cs23[0], cs23[2]};
      const std::vector<Reg> sin = {cs01[1], cs01[3], cs23[1], cs23[3]};
      // The units' first element e0 in the head: rotate-half pairs are (i, i + half),
      // interleaved ones (2i, 2i + 1).
      const bool rotate_half = cfg.layout == RopeLayout::kRotateHalf;
      const Reg e0 = rotate_half ? p0 : kb.Emit(Op::kShl, Type::kB32, {p0, 1});
      const Reg src = gen::AddrAdd(kb, gen::AddrAdd(kb, src_tok, h, int64_t{hd} * 4), e0, 4);
      std::vector<Reg> a, b;
      if (rotate_half) {
        a = gen::LoadAsF32(kb, ElemType::kF32, src, 0, 4, 16);
        b = gen::LoadAsF32(kb, ElemType::kF32, src, int64_t{half} * 4, 4, 16);
      } else {
        const std::vector<Reg> ab = gen::LoadAsF32(kb, ElemType::kF32, src, 0, 8, 16);
        for (int j = 0; j < 4; ++j) {
          a.push_back(ab[2 * j]);
          b.push_back(ab[2 * j + 1]);
        }
      }
      std::vector<Reg> na, nb, nab;
      for (int j = 0; j < 4; ++j) {
        const auto [x, y] = RopeRotate(kb, a[j], b[j], cos[j], sin[j]);
        na.push_back(x);
        nb.push_back(y);
        nab.push_back(x);
        nab.push_back(y);
      }
      // The rotated units into the head that starts at `head` in elements of `et`.
      auto store = [&](ElemType et, Reg head) {
        const int s = ElemSize(et);
        const Reg dst = gen::AddrAdd(kb, head, e0, s);
        if (rotate_half) {
          gen::StoreFromF32(kb, et, dst, 0, na, 4 * s);
          gen::StoreFromF32(kb, et, dst, int64_t{half} * s, nb, 4 * s);
        } else {
          gen::StoreFromF32(kb, et, dst, 0, nab, std::min(8 * s, 16));
        }
      };
      const Reg is_q = kb.Setp(Cmp::kLt, Type::kU32, h, cfg.num_heads);
      {
        auto g = kb.If(is_q);
        store(ElemType::kF32, gen::AddrAdd(kb, q_tok, h, int64_t{hd} * 4));
      }
      const Reg is_k = kb.Emit(Op::kAnd, Type::kPred,
                               {kb.Setp(Cmp::kGe, Type::kU32, h, cfg.num_heads), has_slot});
      {
        auto g = kb.If(is_k);
        const Reg kh = kb.Emit(Op::kSub, Type::kU32, {h, cfg.num_heads});
        store(cfg.kv_dtype, gen::AddrAdd(kb, k_tok, kh, int64_t{cfg.block_size} * hd * es));
      }
    }
    kb.Bra(next);
    kb.Bind(copy_v);
    {
      auto g = kb.If(has_slot);
      const Reg vu = kb.Emit(Op::kSub, Type::kU32, {u, rotate_units});
      const Reg kh = gen::DivConst(kb, vu, hd / 4);
      const Reg e = kb.Emit(Op::kShl, Type::kB32, {gen::RemConst(kb, vu, hd / 4), 2});
      // The v heads follow the q and k heads in the row.
      const std::vector<Reg> vals =
          gen::LoadAsF32(kb, ElemType::kF32, gen::AddrAdd(kb, src_tok, vu, 16),
                         int64_t{cfg.num_heads + cfg.num_kv_heads} * hd * 4, 4, 16);
      const Reg dst =
          gen::AddrAdd(kb, gen::AddrAdd(kb, v_tok, kh, int64_t{cfg.block_size} * hd * es), e, es);
      gen::StoreFromF32(kb, cfg.kv_dtype, dst, 0, vals, 4 * es);
    }
    kb.Bind(next);
    kb.EmitTo(u, Op::kAdd, Type::kU32, {u, threads});
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, u, units), loop);
    kb.Bind(done);
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels
