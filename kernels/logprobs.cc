// One CTA per row, three phases:
//  1. One pass over the row: the max (max.f32 drops NaN) and, per thread, a sorted
//     register list of its max_top best (logit, id). A thread visits its ids in
//     ascending order, so a new logit equal to a listed one ranks after it and the list
//     needs only logit compares; ties are settled by id in phase 3.
//  2. When the max is finite, a second pass sums exp(l - m) per thread in f64 (a long
//     f32 chain over 128k ids would lose ~1e-5 of the sum); ln of the sum is computed in
//     f64 (the exponent, then an atanh series on the mantissa), not with lg2.approx,
//     whose ~2^-22 absolute error would dominate everything else.
//  3. top-N by merging the per-thread lists: N rounds of a block-wide (value, id) argmax
//     over the list heads; the winning thread pops its head. Far cheaper than bisecting
//     64-bit rank keys with a full pass per step (the sampling kernel's top-k).
// Loops containing barriers (the rounds) are controlled by values every thread holds
// identically (the row's N, the broadcast winner), so the whole CTA takes them together.
#include "kernels/logprobs.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/argmax.h"
#include "kernels/generator.h"
#include "kernels/logits_row.h"

namespace ptxserve::kernels {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr double kLn2 = 0.69314718055994530942;
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr uint32_t kNoId = 0xffffffffu;

using Ctx = gen::LogitsRow;
using gen::ForStrided;

// shfl of an f64 as its two 32-bit halves.
Reg ShflF64(KernelBuilder& kb, ptx::ShflMode mode, Reg v, int b) {
  const std::vector<Reg> h = kb.Unpack(v, Type::kB32);
  const Reg lo = kb.Shfl(mode, h[0], b);
  const Reg hi = kb.Shfl(mode, h[1], b);
  return kb.Pack(Type::kF64, {lo, hi});
}

// Block-wide f64 sum; every thread returns the same value (each adds the per-warp
// partials in warp order). `scratch` holds num_warps doubles. One bar.sync, and the
// partials are not protected against a second call: call it once per kernel.
Reg BlockSumF64(Ctx& c, Reg v, const ptx::Symbol& scratch) {
  KernelBuilder& kb = c.kb;
  for (int off = 16; off >= 1; off /= 2) {
    v = kb.Emit(Op::kAdd, Type::kF64, {v, ShflF64(kb, ptx::ShflMode::kDown, v, off)});
  }
  if (c.warps == 1) return ShflF64(kb, ptx::ShflMode::kIdx, v, 0);
  const Reg base = kb.AddressOf(scratch);
  {
    auto g = kb.If(kb.Setp(Cmp::kEq, Type::kU32, c.lane, 0));
    kb.St(Space::kShared, Type::kF64,
          Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {c.warp, 8, base})), {v});
  }
  kb.BarSync();
  const Reg total = kb.Mov(Type::kF64, Operand::F64(0.0));
  for (int w = 0; w < c.warps; ++w) {
    kb.EmitTo(total, Op::kAdd, Type::kF64,
              {total, kb.Ld1(Space::kShared, Type::kF64, Operand::Addr(base, 8 * w))});
  }
  return total;
}

// ln(s) for a positive normal f64: s = 2^e * f with f in [sqrt(1/2), sqrt(2)), and
// ln f = 2 atanh(z), z = (f - 1) / (f + 1), |z| < 0.172: eight odd terms reach 1e-14.
Reg LnF64(KernelBuilder& kb, Reg s) {
  const Reg bits = kb.Mov(Type::kB64, s);
  const Reg e_raw = kb.Cvt(Type::kU32, Type::kU64, kb.Emit(Op::kShr, Type::kU64, {bits, 52}));
  const Reg e = kb.Emit(Op::kSub, Type::kS32, {e_raw, 1023});
  const Reg mant = kb.Emit(Op::kOr, Type::kB64,
                           {kb.Emit(Op::kAnd, Type::kB64, {bits, int64_t{0x000fffffffffffff}}),
                            int64_t{0x3ff0000000000000}});
  const Reg big = kb.Setp(Cmp::kGt, Type::kF64, mant, Operand::F64(kSqrt2));
  const Reg f =
      kb.Selp(Type::kF64, kb.Emit(Op::kMul, Type::kF64, {mant, Operand::F64(0.5)}), mant, big);
  const Reg ei = kb.Selp(Type::kS32, kb.Emit(Op::kAdd, Type::kS32, {e, 1}), e, big);
  const Reg z = kb.Emit(Op::kDiv, Type::kF64,
                        {kb.Emit(Op::kSub, Type::kF64, {f, Operand::F64(1.0)}),
                         kb.Emit(Op::kAdd, Type::kF64, {f, Operand::F64(1.0)})});
  const Reg z2 = kb.Emit(Op::kMul, Type::kF64, {z, z});
  Reg p = kb.Mov(Type::kF64, Operand::F64(1.0 / 15.0));
  for (int k = 13; k >= 1; k -= 2) {
    p = kb.Emit(Op::kFma, Type::kF64, {p, z2, Operand::F64(1.0 / k)});
  }
  const Reg ln_f = kb.Emit(Op::kMul, Type::kF64, {kb.Emit(Op::kAdd, Type::kF64, {z, z}), p});
  const Reg ef = kb.Cvt(Type::kF64, Type::kS32, ei, ptx::Round::kRn);
  return kb.Emit(Op::kFma, Type::kF64, {ef, Operand::F64(kLn2), ln_f});
}

// f32(x - lse) with x widened to f64, as the host computes it.
Reg LogprobOf(KernelBuilder& kb, Reg x, Reg lse) {
  const Reg d = kb.Emit(Op::kSub, Type::kF64, {kb.Cvt(Type::kF64, Type::kF32, x), lse});
  return kb.Cvt(Type::kF32, Type::kF64, d, ptx::Round::kRn);
}

// A thread's best-first list of (logit, id), -inf / kNoId when empty.
struct TopList {
  std::vector<Reg> v, id;
};

// Inserts (l, i) when it beats the last entry; i exceeds every listed id, so it goes
// after the entries whose logit equals l.
void InsertIfBetter(KernelBuilder& kb, TopList& t, Reg want, Reg i, Reg l) {
  const int k = static_cast<int>(t.v.size());
  const Label skip = kb.NewLabel("no_insert");
  const Reg ins =
      kb.Emit(Op::kAnd, Type::kPred, {want, kb.Setp(Cmp::kGt, Type::kF32, l, t.v[k - 1])});
  kb.BraIf(ins, skip, /*if_false=*/true);
  std::vector<Reg> gt(k);
  for (int j = 0; j < k; ++j) gt[j] = kb.Setp(Cmp::kGt, Type::kF32, l, t.v[j]);
  // Descending j, so t[j - 1] is still the old entry when t[j] is rewritten.
  for (int j = k - 1; j >= 1; --j) {
    const Reg v_in = kb.Selp(Type::kF32, l, t.v[j], gt[j]);
    const Reg id_in = kb.Selp(Type::kB32, i, t.id[j], gt[j]);
    kb.EmitTo(t.v[j], Op::kSelp, Type::kF32, {t.v[j - 1], v_in, gt[j - 1]});
    kb.EmitTo(t.id[j], Op::kSelp, Type::kB32, {t.id[j - 1], id_in, gt[j - 1]});
  }
  kb.EmitTo(t.v[0], Op::kSelp, Type::kF32, {l, t.v[0], gt[0]});
  kb.EmitTo(t.id[0], Op::kSelp, Type::kB32, {i, t.id[0], gt[0]});
  kb.Bind(skip);
}

}  // namespace

absl::StatusOr<std::string> GenerateLogprobs(const LogprobsConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const int threads = cfg.threads;
    const int warps = threads / 32;
    const int k = cfg.max_top;
    const int64_t record_bytes = LogprobsRecordBytes(cfg);
    const auto [logits, chosen, top_n, out, vocab, num_rows] = DeclareParams<LogprobsArgs>(kb);
    const ptx::Symbol reduce = kb.Shared("reduce", int64_t{warps + 1} * 4);
    const ptx::Symbol sum64 = kb.Shared("sum64", int64_t{warps} * 8);
    const ptx::Symbol argmax = kb.Shared("argmax", int64_t{warps} * 8);
    const ptx::Symbol winner = kb.Shared("winner", 4);

    const auto [row, done] = gen::EnterRow(kb, num_rows);
    const Reg tid = kb.Special(SReg::kTidX);
    Ctx c{kb,
          kb.Emit(Op::kAdd, Type::kU64,
                  {logits, kb.Emit(Op::kMulWide, Type::kU32,
                                   {row, kb.Emit(Op::kShl, Type::kB32, {vocab, 2})})}),
          vocab,
          tid,
          kb.Emit(Op::kAnd, Type::kB32, {tid, 31}),
          kb.Emit(Op::kShr, Type::kU32, {tid, 5}),
          threads,
          warps};
    const Reg is_t0 = kb.Setp(Cmp::kEq, Type::kU32, tid, 0);
    const Reg rec = kb.Emit(Op::kAdd, Type::kU64,
                            {out, kb.Emit(Op::kMulWide, Type::kU32, {row, record_bytes})});
    Reg n = kb.Ld1(Space::kGlobal, Type::kS32, Operand::Addr(gen::AddrAdd(kb, top_n, row, 4)));
    n = kb.Emit(Op::kMin, Type::kS32, {kb.Emit(Op::kMax, Type::kS32, {n, 0}), k});
    const Reg want = kb.Setp(Cmp::kGt, Type::kS32, n, 0);

    // Phase 1: max and the per-thread lists.
    TopList top;
    for (int j = 0; j < k; ++j) {
      top.v.push_back(kb.Mov(Type::kF32, Operand::F32(-INFINITY)));
      top.id.push_back(kb.Mov(Type::kU32, kNoId));
    }
    Reg m = kb.Mov(Type::kF32, Operand::F32(-INFINITY));
    ForStrided(c, [&](Reg i, Reg l) {
      kb.EmitTo(m, Op::kMax, Type::kF32, {m, l});
      if (k > 0) InsertIfBetter(kb, top, want, i, l);
    });
    m = gen::BlockAllReduceF32(kb, m, gen::Reduce::kMax, warps, reduce, c.lane, c.warp);

    // Phase 2: lse = m + ln(sum exp(l - m)), or m itself when m is +-inf.
    const Reg ln_sum = kb.Mov(Type::kF64, Operand::F64(0.0));
    const Label summed = kb.NewLabel("summed");
    const Reg inf_max =
        kb.Setp(Cmp::kEq, Type::kF32, kb.Emit(Op::kAbs, Type::kF32, {m}), Operand::F32(INFINITY));
    kb.BraIf(inf_max, summed);  // uniform: m is the block's value
    {
      const Reg s = kb.Mov(Type::kF64, Operand::F64(0.0));
      ForStrided(c, [&](Reg, Reg l) {
        // -inf gives ex2(-inf) = 0; NaN would give NaN, so it is zeroed.
        Reg w = kb.Emit(Op::kEx2, Type::kF32,
                        {gen::FMul(kb, gen::FSub(kb, l, m), Operand::F32(kLog2e))});
        w = kb.Selp(Type::kF32, Operand::F32(0.0f), w, kb.Setp(Cmp::kNan, Type::kF32, l, l));
        kb.EmitTo(s, Op::kAdd, Type::kF64, {s, kb.Cvt(Type::kF64, Type::kF32, w)});
      });
      kb.MovTo(ln_sum, LnF64(kb, BlockSumF64(c, s, sum64)));
    }
    kb.Bind(summed);
    const Reg lse = kb.Emit(Op::kAdd, Type::kF64, {kb.Cvt(Type::kF64, Type::kF32, m), ln_sum});

    // The chosen token (entry 0): an id outside the row reads nothing and gets NaN.
    {
      const Reg id = kb.Mov(Type::kS32, -1);  // read by every thread, loaded by thread 0
      {
        auto g = kb.If(is_t0);
        kb.LdTo(Space::kGlobal, Type::kS32, Operand::Addr(gen::AddrAdd(kb, chosen, row, 4)), {id});
      }
      const Reg inside =
          kb.Emit(Op::kAnd, Type::kPred, {is_t0, kb.Setp(Cmp::kLo, Type::kU32, id, vocab)});
      const Reg x = kb.Mov(Type::kF32, Operand::F32(NAN));
      {
        auto g = kb.If(inside);
        kb.LdTo(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, c.row_base, id, 4)),
                {x});
      }
      auto g = kb.If(is_t0);
      const Reg xn =
          kb.Selp(Type::kF32, Operand::F32(-INFINITY), x, kb.Setp(Cmp::kNan, Type::kF32, x, x));
      const Reg lp = kb.Selp(Type::kF32, LogprobOf(kb, xn, lse), Operand::F32(NAN), inside);
      kb.St(Space::kGlobal, Type::kB32, Operand::Addr(rec), {id, lp});
    }
    if (k == 0) {
      kb.Bind(done);
      kb.Ret();
      return;
    }

    // Phase 3: round r finds the r-th best among the list heads.
    const Reg r = kb.Mov(Type::kS32, 0);
    const Label round = kb.NewLabel("round");
    const Label fill = kb.NewLabel("fill");
    const Reg winner_addr = kb.AddressOf(winner);
    kb.Bind(round);
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kS32, r, n), fill);
    {
      Reg bv = kb.Mov(Type::kF32, top.v[0]);
      Reg bi = kb.Mov(Type::kU32, top.id[0]);
      gen::BlockArgmax(kb, &bv, &bi, warps, argmax, c.lane, c.warp);  // valid in thread 0
      Reg win;
      if (warps == 1) {
        win = gen::Broadcast(kb, bi);
      } else {
        // Next round's store comes after the next BlockArgmax barrier, which every thread
        // reaches only after reading this one.
        {
          auto g = kb.If(is_t0);
          kb.St(Space::kShared, Type::kU32, Operand::Addr(winner_addr), {bi});
        }
        kb.BarSync();
        win = kb.Ld1(Space::kShared, Type::kU32, Operand::Addr(winner_addr));
      }
      kb.BraIf(kb.Setp(Cmp::kEq, Type::kU32, win, kNoId), fill);  // lists exhausted
      {
        auto g = kb.If(kb.Setp(Cmp::kEq, Type::kU32, top.id[0], win));
        for (int j = 0; j + 1 < k; ++j) {
          kb.MovTo(top.v[j], top.v[j + 1]);
          kb.MovTo(top.id[j], top.id[j + 1]);
        }
        kb.MovTo(top.v[k - 1], Operand::F32(-INFINITY));
        kb.MovTo(top.id[k - 1], kNoId);
      }
      const Reg slot = gen::AddrAdd(kb, rec, r, sizeof(LogprobsEntry));
      const Reg lp = LogprobOf(kb, bv, lse);
      {
        auto g = kb.If(is_t0);
        kb.St(Space::kGlobal, Type::kB32, Operand::Addr(slot, sizeof(LogprobsEntry)), {bi, lp});
      }
      kb.EmitTo(r, Op::kAdd, Type::kS32, {r, 1});
      kb.Bra(round);
    }
    // Entries r+1..max_top: {-1, -inf}; max_top <= 32 <= threads, one entry per thread.
    kb.Bind(fill);
    {
      const Reg empty =
          kb.Emit(Op::kAnd, Type::kPred,
                  {kb.Setp(Cmp::kGe, Type::kS32, tid, r), kb.Setp(Cmp::kLt, Type::kS32, tid, k)});
      const Reg slot = gen::AddrAdd(kb, rec, tid, sizeof(LogprobsEntry));
      const Reg none = kb.Mov(Type::kS32, -1);
      const Reg ninf = kb.Mov(Type::kF32, Operand::F32(-INFINITY));
      auto g = kb.If(empty);
      kb.St(Space::kGlobal, Type::kB32, Operand::Addr(slot, sizeof(LogprobsEntry)), {none, ninf});
    }
    kb.Bind(done);
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels
