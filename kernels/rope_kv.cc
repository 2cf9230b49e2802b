// One CTA per token: the token's cos/sin are computed once into shared memory (as rope
// does), then each thread takes units of four pairs of a q or k head (two 128-bit loads of
// the qkv row, rotated, stored as f32 into q or as the pool's type into the K pool) or of
// four elements of a v head (copied into the V pool), so the row is read once and every
// load is a 128-bit vector.
#include "kernels/rope_kv.h"

#include <algorithm>
#include <vector>

#include "kernels/generator.h"
#include "kernels/kv_scatter.h"

namespace ptxserve::kernels {

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
    gen::RopeCosSin(kb, half, threads, tid, pos, inv_freq, cs_base);

    // A negative slot (padding) writes no K/V; its pool addresses are computed but unused.
    const Reg has_slot = kb.Setp(Cmp::kGe, Type::kS64, slot, 0);
    const Reg dst_tok =
        gen::PoolTokenElem(kb, slot, cfg.num_kv_heads, cfg.block_size, cfg.head_dim);
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
        const auto [x, y] = gen::RopeRotate(kb, a[j], b[j], cos[j], sin[j]);
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
