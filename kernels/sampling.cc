// One CTA per row, implementing the canonical algorithm of sampling.h. Every loop that
// contains a barrier (the radix passes) is controlled by values every thread computes
// identically from shared memory, so the whole CTA takes the same path; per-thread loops
// (strided scans, a thread's own id range) contain no barrier.
//
// Exactness: the f32 weight arithmetic is emitted as fma.rn only, because ptxas may fuse
// a plain mul.f32 into a following add.f32 (PTX allows it for instructions without a
// rounding modifier), which the host would not do. Sums are u64 (integer weights), so
// the atomics' order and the reduction trees do not matter; the few f64 steps are single
// correctly rounded operations, as on the host.
#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "kernels/argmax.h"
#include "kernels/generator.h"
#include "kernels/logits_row.h"

namespace ptxserve::kernels {

namespace {

constexpr uint32_t kNone = 0xffffffffu;
// Exp (sampling.h step 2).
constexpr float kExpMin = -87.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
constexpr int32_t kRoundBits = 0x4B400000;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                         4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
constexpr float kQScale = 1099511627776.0f;  // 2^40
// Radix select: 8-bit digits, scanned as 16 coarse groups of 16 bins.
constexpr int kBins = 256;
constexpr int kGroup = 16;

Operand F(float v) { return Operand::F32(v); }

// Correctly rounded f32 ops that ptxas leaves alone.
Reg RnAdd(KernelBuilder& kb, const Operand& a, const Operand& b) {
  return kb.Emit(Op::kFma, Type::kF32, {a, F(1.0f), b});
}
Reg RnSub(KernelBuilder& kb, const Operand& a, const Operand& b) {
  return kb.Emit(Op::kFma, Type::kF32, {b, F(-1.0f), a});
}
Reg RnMul(KernelBuilder& kb, const Operand& a, const Operand& b) {
  return kb.Emit(Op::kFma, Type::kF32, {a, b, F(-0.0f)});
}
Reg Fma(KernelBuilder& kb, const Operand& a, const Operand& b, const Operand& c) {
  return kb.Emit(Op::kFma, Type::kF32, {a, b, c});
}

// Exp(x) for x <= 0, step for step as in sampling.h; 0 for NaN and below -87.
Reg Exp(KernelBuilder& kb, Reg x) {
  const Reg under = kb.Setp(Cmp::kLtu, Type::kF32, x, F(kExpMin));
  const Reg xc =
      kb.Emit(Op::kMin, Type::kF32, {kb.Emit(Op::kMax, Type::kF32, {x, F(kExpMin)}), F(0.0f)});
  const Reg t = Fma(kb, xc, F(kLog2e), F(kRound));
  const Reg n = RnSub(kb, t, F(kRound));
  const Reg ni = kb.Emit(Op::kSub, Type::kS32, {kb.Mov(Type::kB32, t), kRoundBits});
  const Reg neg_n = kb.Emit(Op::kNeg, Type::kF32, {n});
  Reg r = Fma(kb, neg_n, F(kLn2Hi), xc);
  r = Fma(kb, neg_n, F(kLn2Lo), r);
  Reg p = Fma(kb, F(kP[0]), r, F(kP[1]));
  for (int i = 2; i < 6; ++i) p = Fma(kb, p, r, F(kP[i]));
  const Reg e = Fma(kb, p, RnMul(kb, r, r), RnAdd(kb, r, F(1.0f)));
  const Reg scale_bits =
      kb.Emit(Op::kShl, Type::kB32, {kb.Emit(Op::kAdd, Type::kS32, {ni, 127}), 23});
  const Reg w = RnMul(kb, e, kb.Mov(Type::kF32, scale_bits));
  return kb.Selp(Type::kF32, F(0.0f), w, under);
}

struct Ctx : gen::LogitsRow {
  Reg m, inv_t;  // the row's max logit and 1 / T, once known
};
using gen::ForStrided;
using gen::LoadLogit;

// w = Exp((l - m) * inv_t).
Reg Weight(Ctx& c, Reg l) { return Exp(c.kb, RnMul(c.kb, RnSub(c.kb, l, c.m), c.inv_t)); }

// q = floor(w * 2^40) as u64.
Reg Quantize(KernelBuilder& kb, Reg w) {
  return kb.Cvt(Type::kU64, Type::kF32, RnMul(kb, w, F(kQScale)), Round::kRzi);
}

// Rank key (sampling.h step 4): order-preserving bits of the logit (-0 as +0, NaN as
// -inf) above the inverted id.
Reg Key(KernelBuilder& kb, Reg i, Reg l) {
  const Reg bits = kb.Mov(Type::kB32, RnAdd(kb, l, F(0.0f)));  // -0 + 0 = +0
  const Reg neg = kb.Setp(Cmp::kLt, Type::kS32, bits, 0);
  Reg ord = kb.Selp(Type::kB32, kb.Emit(Op::kNot, Type::kB32, {bits}),
                    kb.Emit(Op::kOr, Type::kB32, {bits, static_cast<int64_t>(0x80000000u)}), neg);
  ord = kb.Selp(Type::kB32, 0x007fffff, ord, kb.Setp(Cmp::kNan, Type::kF32, l, l));
  const Reg inv_id = kb.Emit(Op::kNot, Type::kB32, {i});
  return kb.Pack(Type::kU64, {inv_id, ord});
}

Reg ToF64(KernelBuilder& kb, Reg u64) { return kb.Cvt(Type::kF64, Type::kU64, u64, Round::kRn); }
Reg MulF64(KernelBuilder& kb, Reg a, Reg b) {
  return kb.Emit(Op::kFma, Type::kF64, {a, b, Operand::F64(-0.0)});
}
// (f64)sum >= need.
Reg Reaches(KernelBuilder& kb, Reg sum, Reg need) {
  return kb.Setp(Cmp::kGe, Type::kF64, ToF64(kb, sum), need);
}

struct RadixShared {
  ptx::Symbol hist;    // u64 [kBins]
  ptx::Symbol groups;  // u64 [kBins / kGroup]
};

// Scans `n` u64 slots at `base` from the last down: returns the index of the first slot
// at which (f64)(*cum + slot) >= need, adding the slots passed over to *cum; slot 0 is
// taken when none reaches. Uniform across the CTA (shared reads only).
Reg ScanDown(KernelBuilder& kb, Reg base, int n, Reg cum, Reg need) {
  const Reg idx = kb.Mov(Type::kU32, n - 1);
  const Label loop = kb.NewLabel("scan");
  const Label done = kb.NewLabel("scan_done");
  kb.Bind(loop);
  const Reg s = kb.Ld1(Space::kShared, Type::kU64,
                       Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {idx, 8, base})));
  const Reg stop = kb.Emit(Op::kOr, Type::kPred,
                           {kb.Setp(Cmp::kEq, Type::kU32, idx, 0),
                            Reaches(kb, kb.Emit(Op::kAdd, Type::kU64, {cum, s}), need)});
  kb.BraIf(stop, done);
  kb.EmitTo(cum, Op::kAdd, Type::kU64, {cum, s});
  kb.EmitTo(idx, Op::kSub, Type::kU32, {idx, 1});
  kb.Bra(loop);
  kb.Bind(done);
  return idx;
}

// Radix select over the rank keys (sampling.h step 4). On entry `tau` is the floor (keys
// below it never count); on exit it is the largest t >= floor such that the keys >= t
// still reach `need`: (f64)(sum of v over them) >= need, with v = 1 (count) or v = q
// (mass, when `top_p` is given: need = (f64)top_p * (f64)(total mass over the floor),
// found in the first pass). Invariant: the keys >= `pre` (with zero low bits) reach need;
// `above` is the sum over keys whose digits so far are larger than pre's.
void RadixSelect(Ctx& c, const RadixShared& sh, Reg tau, Reg need_in, Reg top_p, bool mass) {
  KernelBuilder& kb = c.kb;
  const Reg floor = kb.Mov(Type::kU64, tau);
  const Reg pre = kb.Mov(Type::kU64, 0);
  const Reg above = kb.Mov(Type::kU64, 0);
  const Reg mask = kb.Mov(Type::kB64, 0);  // the digits fixed so far
  const Reg need = mass ? kb.Mov(Type::kF64, Operand::F64(0.0)) : need_in;
  const Reg shift = kb.Mov(Type::kU32, 56);
  const Reg hist = kb.AddressOf(sh.hist);
  const Reg groups = kb.AddressOf(sh.groups);
  const Label pass = kb.NewLabel("radix_pass");
  const Label done = kb.NewLabel("radix_done");
  kb.Bind(pass);
  for (int base = 0; base < kBins; base += c.threads) {
    const Reg j = gen::UAdd(kb, c.tid, base);
    auto g = kb.If(kb.Setp(Cmp::kLt, Type::kU32, j, kBins));
    kb.St(Space::kShared, Type::kU64, Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {j, 8, hist})),
          {kb.Mov(Type::kU64, 0)});
  }
  kb.BarSync();
  ForStrided(c, [&](Reg i, Reg l) {
    const Reg key = Key(kb, i, l);
    const Reg in =
        kb.Emit(Op::kAnd, Type::kPred,
                {kb.Setp(Cmp::kHs, Type::kU64, key, floor),
                 kb.Setp(Cmp::kEq, Type::kU64, kb.Emit(Op::kAnd, Type::kB64, {key, mask}), pre)});
    const Label skip = kb.NewLabel("radix_skip");
    kb.BraIf(in, skip, /*if_false=*/true);
    const Reg v = mass ? Quantize(kb, Weight(c, l)) : kb.Mov(Type::kU64, 1);
    const Reg digit = kb.Emit(
        Op::kAnd, Type::kB32,
        {kb.Cvt(Type::kU32, Type::kU64, kb.Emit(Op::kShr, Type::kU64, {key, shift})), kBins - 1});
    kb.Red(Op::kAtomAdd, Space::kShared, Type::kU64,
           Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {digit, 8, hist})), v);
    kb.Bind(skip);
  });
  kb.BarSync();
  {
    // Group sums, one thread per group.
    auto g = kb.If(kb.Setp(Cmp::kLt, Type::kU32, c.tid, kBins / kGroup));
    const Reg gbase = kb.Emit(Op::kMadLo, Type::kU32, {c.tid, 8 * kGroup, hist});
    const Reg s = kb.Mov(Type::kU64, 0);
    for (int j = 0; j < kGroup; ++j) {
      kb.EmitTo(s, Op::kAdd, Type::kU64,
                {s, kb.Ld1(Space::kShared, Type::kU64, Operand::Addr(gbase, 8 * j))});
    }
    kb.St(Space::kShared, Type::kU64,
          Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {c.tid, 8, groups})), {s});
  }
  kb.BarSync();
  if (mass) {
    // First pass: every key above the floor is in the histogram.
    const Reg total = kb.Mov(Type::kU64, 0);
    for (int j = 0; j < kBins / kGroup; ++j) {
      kb.EmitTo(total, Op::kAdd, Type::kU64,
                {total, kb.Ld1(Space::kShared, Type::kU64, Operand::Addr(groups, 8 * j))});
    }
    const Reg first = kb.Setp(Cmp::kEq, Type::kU32, shift, 56);
    const Reg want = MulF64(kb, kb.Cvt(Type::kF64, Type::kF32, top_p), ToF64(kb, total));
    kb.EmitTo(need, Op::kSelp, Type::kF64, {want, need, first});
  }
  const Reg cum = kb.Mov(Type::kU64, above);
  const Reg group = ScanDown(kb, groups, kBins / kGroup, cum, need);
  const Reg bin =
      ScanDown(kb, kb.Emit(Op::kMadLo, Type::kU32, {group, 8 * kGroup, hist}), kGroup, cum, need);
  const Reg digit = kb.Emit(Op::kMadLo, Type::kU32, {group, kGroup, bin});
  kb.MovTo(above, cum);
  kb.EmitTo(pre, Op::kOr, Type::kB64,
            {pre, kb.Emit(Op::kShl, Type::kB64, {kb.Cvt(Type::kU64, Type::kU32, digit), shift})});
  kb.EmitTo(mask, Op::kOr, Type::kB64,
            {mask, kb.Emit(Op::kShl, Type::kB64, {kb.Mov(Type::kB64, kBins - 1), shift})});
  kb.BarSync();  // every thread has read the histogram before the next pass clears it
  kb.BraIf(kb.Setp(Cmp::kEq, Type::kU32, shift, 0), done);
  kb.EmitTo(shift, Op::kSub, Type::kU32, {shift, 8});
  kb.Bra(pass);
  kb.Bind(done);
  kb.MovTo(tau, pre);
}

// Exclusive prefix of `v` (u64) over the CTA's threads in tid order, and the total;
// `wsum` holds one u64 per warp. Contains bar.sync.
void BlockScanU64(Ctx& c, Reg v, const ptx::Symbol& wsum, Reg* prefix, Reg* total) {
  KernelBuilder& kb = c.kb;
  const Reg x = kb.Mov(Type::kU64, v);
  for (int off = 1; off < 32; off *= 2) {
    const std::vector<Reg> parts = kb.Unpack(x, Type::kB32);
    const Reg lo = kb.Shfl(ptx::ShflMode::kUp, parts[0], off);
    const Reg hi = kb.Shfl(ptx::ShflMode::kUp, parts[1], off);
    const Reg y = kb.Pack(Type::kU64, {lo, hi});
    auto g = kb.If(kb.Setp(Cmp::kGe, Type::kU32, c.lane, off));
    kb.EmitTo(x, Op::kAdd, Type::kU64, {x, y});
  }
  const Reg base = kb.AddressOf(wsum);
  {
    auto g = kb.If(kb.Setp(Cmp::kEq, Type::kU32, c.lane, 31));
    kb.St(Space::kShared, Type::kU64,
          Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {c.warp, 8, base})), {x});
  }
  kb.BarSync();
  *prefix = kb.Emit(Op::kSub, Type::kU64, {x, v});
  *total = kb.Mov(Type::kU64, 0);
  for (int w = 0; w < c.warps; ++w) {
    const Reg s = kb.Ld1(Space::kShared, Type::kU64, Operand::Addr(base, 8 * w));
    auto g = kb.If(kb.Setp(Cmp::kGt, Type::kU32, c.warp, w));
    kb.EmitTo(*prefix, Op::kAdd, Type::kU64, {*prefix, s});
  }
  for (int w = 0; w < c.warps; ++w) {
    kb.EmitTo(*total, Op::kAdd, Type::kU64,
              {*total, kb.Ld1(Space::kShared, Type::kU64, Operand::Addr(base, 8 * w))});
  }
}

}  // namespace

absl::StatusOr<std::string> GenerateSampling(const SamplingConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const int threads = cfg.threads;
    const int warps = threads / 32;
    const auto [logits, temperature, top_k, top_p, min_p, uniform, out, vocab, num_rows] =
        DeclareParams<SamplingArgs>(kb);
    const ptx::Symbol reduce = kb.Shared("reduce", int64_t{warps + 1} * 4);
    const ptx::Symbol argmax = kb.Shared("argmax", int64_t{warps} * 8);
    const RadixShared radix{kb.Shared("hist", kBins * 8), kb.Shared("groups", kBins / kGroup * 8)};
    const ptx::Symbol wsum = kb.Shared("wsum", int64_t{warps} * 8);

    const auto [row, done] = gen::EnterRow(kb, num_rows);
    const Label greedy = kb.NewLabel("greedy");
    const Reg tid = kb.Special(SReg::kTidX);
    Ctx c{{kb, gen::AddrAdd(kb, logits, kb.Emit(Op::kMulLo, Type::kU32, {row, vocab}), 4), vocab,
           tid, kb.Emit(Op::kAnd, Type::kB32, {tid, 31}), kb.Emit(Op::kShr, Type::kU32, {tid, 5}),
           threads, warps},
          {},
          {}};
    const Reg is_t0 = kb.Setp(Cmp::kEq, Type::kU32, tid, 0);
    auto row_param = [&](Reg ptr, Type t, int bytes) {
      return kb.Ld1(Space::kGlobal, t, Operand::Addr(gen::AddrAdd(kb, ptr, row, bytes)));
    };
    const Reg temp = row_param(temperature, Type::kF32, 4);
    const Reg k = row_param(top_k, Type::kS32, 4);
    const Reg p = row_param(top_p, Type::kF32, 4);
    const Reg mp = row_param(min_p, Type::kF32, 4);
    const Reg u = row_param(uniform, Type::kF64, 8);

    // Step 1: greedy by request, or because the row has no finite maximum or T is tiny.
    const Reg by_request = kb.Emit(
        Op::kOr, Type::kPred,
        {kb.Setp(Cmp::kLe, Type::kF32, temp, F(0.0f)), kb.Setp(Cmp::kEq, Type::kS32, k, 1)});
    kb.BraIf(by_request, greedy);
    Reg m = kb.Mov(Type::kF32, F(-INFINITY));
    ForStrided(c, [&](Reg, Reg l) { kb.EmitTo(m, Op::kMax, Type::kF32, {m, l}); });
    c.m = gen::BlockAllReduceF32(kb, m, gen::Reduce::kMax, warps, reduce, c.lane, c.warp);
    c.inv_t = kb.Emit(Op::kDiv, Type::kF32, {F(1.0f), temp});
    const Reg degenerate =
        kb.Emit(Op::kOr, Type::kPred,
                {kb.Setp(Cmp::kEq, Type::kF32, kb.Emit(Op::kAbs, Type::kF32, {c.m}), F(INFINITY)),
                 kb.Setp(Cmp::kEq, Type::kF32, c.inv_t, F(INFINITY))});
    kb.BraIf(degenerate, greedy);

    // Step 4: tau.
    const Reg tau = kb.Mov(Type::kU64, 0);
    const Label no_k = kb.NewLabel("no_top_k");
    const Reg use_k =
        kb.Emit(Op::kAnd, Type::kPred,
                {kb.Setp(Cmp::kGt, Type::kS32, k, 0), kb.Setp(Cmp::kLo, Type::kU32, k, vocab)});
    kb.BraIf(use_k, no_k, /*if_false=*/true);
    RadixSelect(c, radix, tau, kb.Cvt(Type::kF64, Type::kS32, k, Round::kRn), {}, /*mass=*/false);
    kb.Bind(no_k);
    const Label no_p = kb.NewLabel("no_top_p");
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kF32, p, F(1.0f)), no_p, /*if_false=*/true);
    RadixSelect(c, radix, tau, {}, p, /*mass=*/true);
    kb.Bind(no_p);

    // Steps 5-6: thread t owns ids [t * chunk, (t + 1) * chunk), so a prefix over the
    // threads' sums is a prefix in id order.
    const Reg chunk = gen::DivConst(kb, gen::UAdd(kb, vocab, threads - 1), threads);
    const Reg start = kb.Emit(Op::kMulLo, Type::kU32, {tid, chunk});
    const Reg end = kb.Emit(Op::kMin, Type::kU32, {gen::UAdd(kb, start, chunk), vocab});
    // Runs body(i, q) over the thread's ids, q = 0 for ids not kept.
    auto for_chunk = [&](const std::function<void(Reg i, Reg q)>& body, Label exit) {
      const Reg i = kb.Mov(Type::kU32, start);
      const Label loop = kb.NewLabel("chunk");
      kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, i, end), exit);
      kb.Bind(loop);
      const Reg l = LoadLogit(c, i);
      const Reg w = Weight(c, l);
      const Reg kept = kb.Emit(Op::kAnd, Type::kPred,
                               {kb.Setp(Cmp::kHs, Type::kU64, Key(kb, i, l), tau),
                                kb.Setp(Cmp::kGe, Type::kF32, w, mp)});
      body(i, kb.Selp(Type::kU64, Quantize(kb, w), 0, kept));
      kb.EmitTo(i, Op::kAdd, Type::kU32, {i, 1});
      kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, i, end), loop);
    };
    const Reg mine = kb.Mov(Type::kU64, 0);
    const Label summed = kb.NewLabel("summed");
    for_chunk([&](Reg, Reg q) { kb.EmitTo(mine, Op::kAdd, Type::kU64, {mine, q}); }, summed);
    kb.Bind(summed);
    Reg prefix, total;
    BlockScanU64(c, mine, wsum, &prefix, &total);
    // target = min(trunc(u * (f64)K), K - 1).
    const Reg last = kb.Emit(Op::kSub, Type::kU64, {total, 1});
    const Reg target = kb.Emit(
        Op::kMin, Type::kU64,
        {kb.Cvt(Type::kU64, Type::kF64, MulF64(kb, u, ToF64(kb, total)), Round::kRzi), last});
    // The one thread whose range holds the target walks it and writes the id.
    const Reg mine_has = kb.Emit(
        Op::kAnd, Type::kPred,
        {kb.Setp(Cmp::kLs, Type::kU64, prefix, target),
         kb.Setp(Cmp::kHi, Type::kU64, kb.Emit(Op::kAdd, Type::kU64, {prefix, mine}), target)});
    kb.BraIf(mine_has, done, /*if_false=*/true);
    {
      const Reg cum = kb.Mov(Type::kU64, prefix);
      for_chunk(
          [&](Reg i, Reg q) {
            kb.EmitTo(cum, Op::kAdd, Type::kU64, {cum, q});
            const Reg hit = kb.Setp(Cmp::kHi, Type::kU64, cum, target);
            {
              auto g = kb.If(hit);
              kb.St(Space::kGlobal, Type::kU32, Operand::Addr(gen::AddrAdd(kb, out, row, 4)), {i});
            }
            kb.BraIf(hit, done);
          },
          done);
    }
    kb.Bra(done);

    // Greedy: argmax with the sampler's tie rules.
    kb.Bind(greedy);
    {
      Reg v = kb.Mov(Type::kF32, F(-INFINITY));
      Reg id = kb.Mov(Type::kU32, kNone);
      ForStrided(c, [&](Reg i, Reg l) {
        const Reg take = kb.Emit(Op::kOr, Type::kPred,
                                 {kb.Setp(Cmp::kGt, Type::kF32, l, v),
                                  kb.Emit(Op::kAnd, Type::kPred,
                                          {kb.Setp(Cmp::kEq, Type::kF32, l, v),
                                           kb.Setp(Cmp::kEq, Type::kU32, id, kNone)})});
        kb.EmitTo(v, Op::kSelp, Type::kF32, {l, v, take});
        kb.EmitTo(id, Op::kSelp, Type::kB32, {i, id, take});
      });
      gen::BlockArgmax(kb, &v, &id, warps, argmax, c.lane, c.warp);
      const Reg result = kb.Selp(Type::kU32, 0, id, kb.Setp(Cmp::kEq, Type::kU32, id, kNone));
      auto g = kb.If(is_t0);
      kb.St(Space::kGlobal, Type::kU32, Operand::Addr(gen::AddrAdd(kb, out, row, 4)), {result});
    }
    kb.Bind(done);
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels
