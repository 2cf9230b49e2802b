// cos/sin of the token's head_dim/2 angles are computed once per CTA into shared
// memory, then every (head, pair) of q and k is rotated with them.
#include "kernels/rope.h"

#include <algorithm>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

// 2*pi as C1 + C2 + C3: C1 has few significant bits, so k * C1 loses nothing in the fma.
constexpr double kTwoPi = 2.0 * std::numbers::pi;
constexpr float kC1 = 6.28125f;
const float kC2 = static_cast<float>(kTwoPi - kC1);
const float kC3 = static_cast<float>(kTwoPi - kC1 - static_cast<double>(kC2));

}  // namespace

int RopeConfig::Threads() const {
  const int64_t pairs = int64_t{num_heads + num_kv_heads} * head_dim / 2;
  // Up to 1024: a decode step has one CTA per token, and each thread's pairs run one after
  // another (load, rotate, store), so fewer threads leave a lone CTA latency-bound.
  return static_cast<int>(std::clamp<int64_t>(CeilDiv(pairs, 32) * 32, 32, 1024));
}

namespace gen {

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

std::pair<Reg, Reg> RopeRotate(KernelBuilder& kb, Reg a, Reg b, Reg cos, Reg sin) {
  // a' = a cos - b sin, b' = b cos + a sin (as the CPU reference rounds them).
  return {gen::FSub(kb, gen::FMul(kb, a, cos), gen::FMul(kb, b, sin)),
          gen::FAdd(kb, gen::FMul(kb, b, cos), gen::FMul(kb, a, sin))};
}

}  // namespace gen

absl::StatusOr<std::string> GenerateRope(const RopeConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const int half = cfg.head_dim / 2;
    const int threads = cfg.Threads();
    const int64_t pairs = int64_t{cfg.num_heads + cfg.num_kv_heads} * half;
    const auto [q, k, positions, inv_freq, num_tokens] = DeclareParams<RopeArgs>(kb);
    const ptx::Symbol cs = kb.Shared("cos_sin", int64_t{half} * 8);

    const auto [t, done] = gen::EnterRow(kb, num_tokens);
    const Reg tid = kb.Special(SReg::kTidX);
    const Reg pos_i =
        kb.Ld1(Space::kGlobal, Type::kS32, Operand::Addr(gen::AddrAdd(kb, positions, t, 4)));
    const Reg pos = kb.Cvt(Type::kF32, Type::kS32, pos_i, ptx::Round::kRn);
    const Reg cs_base = kb.AddressOf(cs);

    gen::RopeCosSin(kb, half, threads, tid, pos, inv_freq, cs_base);
    kb.BarSync();

    const Reg p = kb.Mov(Type::kU32, tid);
    const ptx::Label loop = kb.NewLabel("pair_loop");
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, p, pairs), done);
    kb.Bind(loop);
    {
      const Reg h = gen::DivConst(kb, p, half);
      const Reg i = gen::RemConst(kb, p, half);
      const Reg is_q = kb.Setp(Cmp::kLt, Type::kU32, h, cfg.num_heads);
      // Row of (t, h) in q, or of (t, h - num_heads) in k.
      const Reg qrow = kb.Emit(Op::kMadLo, Type::kU32, {t, cfg.num_heads, h});
      const Reg krow =
          kb.Emit(Op::kSub, Type::kU32,
                  {kb.Emit(Op::kMadLo, Type::kU32, {t, cfg.num_kv_heads, h}), cfg.num_heads});
      const Reg qa = gen::AddrAdd(kb, q, qrow, int64_t{cfg.head_dim} * 4);
      const Reg ka = gen::AddrAdd(kb, k, krow, int64_t{cfg.head_dim} * 4);
      const Reg base = kb.Selp(Type::kU64, qa, ka, is_q);
      const std::vector<Reg> csv =
          kb.Ld(Space::kShared, Type::kF32,
                Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {i, 8, cs_base})), 2);
      Reg a, b, aa;
      if (cfg.layout == RopeLayout::kRotateHalf) {
        aa = gen::AddrAdd(kb, base, i, 4);
        a = kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(aa));
        b = kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(aa, int64_t{half} * 4));
      } else {
        aa = gen::AddrAdd(kb, base, i, 8);
        const std::vector<Reg> ab = kb.Ld(Space::kGlobal, Type::kF32, Operand::Addr(aa), 2);
        a = ab[0];
        b = ab[1];
      }
      const auto [na, nb] = gen::RopeRotate(kb, a, b, csv[0], csv[1]);
      if (cfg.layout == RopeLayout::kRotateHalf) {
        kb.St(Space::kGlobal, Type::kF32, Operand::Addr(aa), {na});
        kb.St(Space::kGlobal, Type::kF32, Operand::Addr(aa, int64_t{half} * 4), {nb});
      } else {
        kb.St(Space::kGlobal, Type::kF32, Operand::Addr(aa), {na, nb});
      }
    }
    kb.EmitTo(p, Op::kAdd, Type::kU32, {p, threads});
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, p, pairs), loop);
    kb.Bind(done);
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels
