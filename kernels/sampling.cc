// One CTA per row. Every loop that contains a barrier (the bisections) is controlled
// by block-reduced values that every thread holds identically, so the whole CTA takes
// the same path; per-thread loops (scans of a thread's ids) contain no barrier.
#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "kernels/argmax.h"
#include "kernels/ptx/builder.h"

namespace ptxserve::kernels {

using ptx::Cmp;
using ptx::KernelBuilder;
using ptx::Label;
using ptx::Op;
using ptx::Operand;
using ptx::Reg;
using ptx::Space;
using ptx::SReg;
using ptx::Type;

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr uint32_t kNone = 0xffffffffu;

struct Ctx {
  KernelBuilder& kb;
  Reg row_base;  // u64 address of the row's logits
  Reg vocab;
  Reg tid, lane, warp;
  int threads;
  int warps;
  ptx::Symbol reduce;
};

// for (i = tid; i < vocab; i += threads) body(i, logit[i])
void ForStrided(Ctx& c, const std::function<void(Reg i, Reg l)>& body) {
  KernelBuilder& kb = c.kb;
  const Reg i = kb.Mov(Type::kU32, c.tid);
  const Label loop = kb.NewLabel("strided");
  const Label end = kb.NewLabel("strided_end");
  kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, i, c.vocab), end);
  kb.Bind(loop);
  body(i, kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, c.row_base, i, 4))));
  kb.EmitTo(i, Op::kAdd, Type::kU32, {i, c.threads});
  kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, i, c.vocab), loop);
  kb.Bind(end);
}

// Rank key: order-preserving bits of the logit (NaN as -inf) above the inverted id,
// so a larger key ranks first and ties go to the lower id.
Reg Key(KernelBuilder& kb, Reg i, Reg l) {
  const Reg bits = kb.Mov(Type::kB32, l);
  const Reg neg = kb.Setp(Cmp::kLt, Type::kS32, bits, 0);
  Reg ord = kb.Selp(Type::kB32, kb.Emit(Op::kNot, Type::kB32, {bits}),
                    kb.Emit(Op::kOr, Type::kB32, {bits, static_cast<int64_t>(0x80000000u)}), neg);
  ord = kb.Selp(Type::kB32, 0x007fffff, ord, kb.Setp(Cmp::kNan, Type::kF32, l, l));
  const Reg inv_id = kb.Emit(Op::kNot, Type::kB32, {i});
  return kb.Pack(Type::kU64, {inv_id, ord});
}

// exp((l - m) / T) as 2^((l - m) * c), c = log2(e) / T; NaN logits weigh 0.
Reg Weight(KernelBuilder& kb, Reg l, Reg m, Reg c) {
  const Reg w = kb.Emit(Op::kEx2, Type::kF32, {gen::FMul(kb, gen::FSub(kb, l, m), c)});
  return kb.Selp(Type::kF32, Operand::F32(0.0f), w, kb.Setp(Cmp::kNan, Type::kF32, l, l));
}

// Block-wide count of keys >= tau (every thread gets it).
Reg CountAtLeast(Ctx& c, Reg tau) {
  KernelBuilder& kb = c.kb;
  const Reg n = kb.Mov(Type::kF32, Operand::F32(0.0f));
  ForStrided(c, [&](Reg i, Reg l) {
    const Reg ge = kb.Setp(Cmp::kHs, Type::kU64, Key(kb, i, l), tau);
    kb.EmitTo(n, Op::kAdd, Type::kF32,
              {n, kb.Selp(Type::kF32, Operand::F32(1.0f), Operand::F32(0.0f), ge)});
  });
  return gen::BlockAllReduceF32(kb, n, gen::Reduce::kSum, c.warps, c.reduce, c.lane, c.warp);
}

// Block-wide sum of the weights of keys >= tau.
Reg MassAtLeast(Ctx& c, Reg tau, Reg m, Reg coef) {
  KernelBuilder& kb = c.kb;
  const Reg s = kb.Mov(Type::kF32, Operand::F32(0.0f));
  ForStrided(c, [&](Reg i, Reg l) {
    const Reg ge = kb.Setp(Cmp::kHs, Type::kU64, Key(kb, i, l), tau);
    auto g = kb.If(ge);
    kb.EmitTo(s, Op::kAdd, Type::kF32, {s, Weight(kb, l, m, coef)});
  });
  return gen::BlockAllReduceF32(kb, s, gen::Reduce::kSum, c.warps, c.reduce, c.lane, c.warp);
}

// The largest tau in [lo, 2^64 - 1] with holds(tau) (holds is monotone: true up to
// some point, false after; holds(lo) is true). 64 bisection steps at most.
void Bisect(KernelBuilder& kb, Reg lo, const std::function<Reg(Reg)>& holds) {
  const Reg hi = kb.Mov(Type::kU64, static_cast<int64_t>(-1));
  const Label loop = kb.NewLabel("bisect");
  const Label end = kb.NewLabel("bisect_end");
  kb.Bind(loop);
  kb.BraIf(kb.Setp(Cmp::kHs, Type::kU64, lo, hi), end);
  const Reg half = kb.Emit(Op::kShr, Type::kU64, {kb.Emit(Op::kSub, Type::kU64, {hi, lo}), 1});
  const Reg mid = kb.Emit(Op::kAdd, Type::kU64, {kb.Emit(Op::kAdd, Type::kU64, {lo, half}), 1});
  const Reg ok = holds(mid);
  kb.EmitTo(lo, Op::kSelp, Type::kB64, {mid, lo, ok});
  kb.EmitTo(hi, Op::kSelp, Type::kB64, {hi, kb.Emit(Op::kSub, Type::kU64, {mid, 1}), ok});
  kb.Bra(loop);
  kb.Bind(end);
}

}  // namespace

absl::Status SamplingConfig::Validate() const {
  if (absl::Status s = target.Validate(); !s.ok()) return s;
  if (threads < 32 || threads > 1024 || threads % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads = ", threads, ": want a multiple of 32 in [32, 1024]"));
  }
  return absl::OkStatus();
}

std::string SamplingConfig::Key() const {
  return absl::StrCat("sampling:t", threads, ":", target.Key());
}

LaunchDims SamplingLaunch(const SamplingConfig& cfg, int64_t num_rows) {
  LaunchDims d;
  d.grid = {static_cast<uint32_t>(std::max<int64_t>(num_rows, 1)), 1, 1};
  d.block = {static_cast<uint32_t>(cfg.threads), 1, 1};
  return d;
}

absl::StatusOr<std::string> GenerateSampling(const SamplingConfig& cfg) {
  if (absl::Status s = cfg.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("sampling config: ", s.message()));
  }
  const int threads = cfg.threads;
  const int warps = threads / 32;
  KernelBuilder kb(kSamplingEntry, cfg.target);
  kb.SetMaxThreads(threads);
  const Reg logits = kb.GlobalPtrParam("logits");
  const Reg temperature = kb.GlobalPtrParam("temperature");
  const Reg top_k = kb.GlobalPtrParam("top_k");
  const Reg top_p = kb.GlobalPtrParam("top_p");
  const Reg uniform = kb.GlobalPtrParam("uniform");
  const Reg out = kb.GlobalPtrParam("out");
  const Reg vocab = kb.Param("vocab", Type::kU32);
  const Reg num_rows = kb.Param("num_rows", Type::kU32);
  const ptx::Symbol reduce = kb.Shared("reduce", int64_t{warps + 1} * 4);
  const ptx::Symbol argmax = kb.Shared("argmax", int64_t{warps} * 8);
  const ptx::Symbol partial = kb.Shared("partial", int64_t{threads} * 4);
  const ptx::Symbol pick = kb.Shared("pick", 8);  // [0] drawn id, [1] last weighted id

  const Label done = kb.NewLabel("done");
  const Label greedy = kb.NewLabel("greedy");
  const Reg row = kb.Special(SReg::kCtaidX);
  kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, row, num_rows), done);  // uniform per CTA
  const Reg tid = kb.Special(SReg::kTidX);
  Ctx c{kb,
        gen::AddrAdd(kb, logits, kb.Emit(Op::kMulLo, Type::kU32, {row, vocab}), 4),
        vocab,
        tid,
        kb.Emit(Op::kAnd, Type::kB32, {tid, 31}),
        kb.Emit(Op::kShr, Type::kU32, {tid, 5}),
        threads,
        warps,
        reduce};
  const Reg is_t0 = kb.Setp(Cmp::kEq, Type::kU32, tid, 0);
  const Reg pick_base = kb.AddressOf(pick);
  {
    auto g = kb.If(is_t0);
    const Reg none = kb.Mov(Type::kU32, kNone);
    const Reg zero = kb.Mov(Type::kU32, 0);
    kb.St(Space::kShared, Type::kU32, Operand::Addr(pick_base), {none, zero});
  }
  auto load_row_param = [&](Reg ptr, Type t) {
    return kb.Ld1(Space::kGlobal, t, Operand::Addr(gen::AddrAdd(kb, ptr, row, 4)));
  };
  const Reg temp = load_row_param(temperature, Type::kF32);
  const Reg k = load_row_param(top_k, Type::kS32);
  const Reg p = load_row_param(top_p, Type::kF32);
  const Reg u = load_row_param(uniform, Type::kF32);

  // Greedy by request, or because the row has no finite maximum.
  const Reg by_request = kb.Emit(Op::kOr, Type::kPred,
                                 {kb.Setp(Cmp::kLe, Type::kF32, temp, Operand::F32(0.0f)),
                                  kb.Setp(Cmp::kEq, Type::kS32, k, 1)});
  kb.BraIf(by_request, greedy);
  Reg m = kb.Mov(Type::kF32, Operand::F32(-INFINITY));
  ForStrided(c, [&](Reg, Reg l) { kb.EmitTo(m, Op::kMax, Type::kF32, {m, l}); });
  m = gen::BlockAllReduceF32(kb, m, gen::Reduce::kMax, warps, reduce, c.lane, c.warp);
  const Reg inf_max =
      kb.Setp(Cmp::kEq, Type::kF32, kb.Emit(Op::kAbs, Type::kF32, {m}), Operand::F32(INFINITY));
  kb.BraIf(inf_max, greedy);
  const Reg coef = kb.Emit(Op::kDiv, Type::kF32, {Operand::F32(kLog2e), temp});

  // top-k: tau = the k-th largest key (keys are distinct, so exactly k are >= tau).
  const Reg tau = kb.Mov(Type::kU64, 0);
  const Label no_k = kb.NewLabel("no_top_k");
  const Reg use_k =
      kb.Emit(Op::kAnd, Type::kPred,
              {kb.Setp(Cmp::kGt, Type::kS32, k, 0), kb.Setp(Cmp::kLo, Type::kU32, k, vocab)});
  kb.BraIf(use_k, no_k, /*if_false=*/true);
  {
    const Reg kf = kb.Cvt(Type::kF32, Type::kS32, k, ptx::Round::kRn);
    Bisect(kb, tau,
           [&](Reg mid) { return kb.Setp(Cmp::kGe, Type::kF32, CountAtLeast(c, mid), kf); });
  }
  kb.Bind(no_k);
  // top-p: the largest tau' >= tau whose keys still hold top_p of the top-k mass.
  const Label no_p = kb.NewLabel("no_top_p");
  kb.BraIf(kb.Setp(Cmp::kLt, Type::kF32, p, Operand::F32(1.0f)), no_p, /*if_false=*/true);
  {
    const Reg need = gen::FMul(kb, p, MassAtLeast(c, tau, m, coef));
    Bisect(kb, tau, [&](Reg mid) {
      return kb.Setp(Cmp::kGe, Type::kF32, MassAtLeast(c, mid, m, coef), need);
    });
  }
  kb.Bind(no_p);

  // Draw: thread t owns ids [t * chunk, (t + 1) * chunk), so a prefix over the
  // threads' sums is a prefix in id order.
  const Reg chunk = gen::DivConst(kb, gen::UAdd(kb, vocab, threads - 1), threads);
  const Reg start = kb.Emit(Op::kMulLo, Type::kU32, {tid, chunk});
  const Reg end = kb.Emit(Op::kMin, Type::kU32, {gen::UAdd(kb, start, chunk), vocab});
  auto for_chunk = [&](const std::function<void(Reg i, Reg w)>& body, Label exit) {
    const Reg i = kb.Mov(Type::kU32, start);
    const Label loop = kb.NewLabel("chunk");
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, i, end), exit);
    kb.Bind(loop);
    const Reg l =
        kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, c.row_base, i, 4)));
    const Reg kept = kb.Setp(Cmp::kHs, Type::kU64, Key(kb, i, l), tau);
    body(i, kb.Selp(Type::kF32, Weight(kb, l, m, coef), Operand::F32(0.0f), kept));
    kb.EmitTo(i, Op::kAdd, Type::kU32, {i, 1});
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, i, end), loop);
  };
  const Reg mine = kb.Mov(Type::kF32, Operand::F32(0.0f));
  const Reg last = kb.Mov(Type::kU32, kNone);
  const Label summed = kb.NewLabel("summed");
  for_chunk(
      [&](Reg i, Reg w) {
        kb.EmitTo(mine, Op::kAdd, Type::kF32, {mine, w});
        kb.EmitTo(last, Op::kSelp, Type::kB32,
                  {i, last, kb.Setp(Cmp::kGt, Type::kF32, w, Operand::F32(0.0f))});
      },
      summed);
  kb.Bind(summed);
  const Reg part_base = kb.AddressOf(partial);
  kb.St(Space::kShared, Type::kF32,
        Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {tid, 4, part_base})), {mine});
  {
    auto g = kb.If(kb.Setp(Cmp::kNe, Type::kU32, last, kNone));
    kb.Red(Op::kAtomMax, Space::kShared, Type::kU32, Operand::Addr(pick_base, 4), last);
  }
  kb.BarSync();
  // Every thread sums all partials in the same order: the same total everywhere.
  const Reg total = kb.Mov(Type::kF32, Operand::F32(0.0f));
  const Reg prefix = kb.Mov(Type::kF32, Operand::F32(0.0f));
  {
    const Reg j = kb.Mov(Type::kU32, 0);
    const Reg pa = kb.Mov(Type::kU32, part_base);
    const Label loop = kb.NewLabel("prefix");
    kb.Bind(loop);
    const Reg pj = kb.Ld1(Space::kShared, Type::kF32, Operand::Addr(pa));
    kb.EmitTo(prefix, Op::kSelp, Type::kF32,
              {total, prefix, kb.Setp(Cmp::kEq, Type::kU32, tid, j)});
    kb.EmitTo(total, Op::kAdd, Type::kF32, {total, pj});
    kb.EmitTo(pa, Op::kAdd, Type::kU32, {pa, 4});
    kb.EmitTo(j, Op::kAdd, Type::kU32, {j, 1});
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, j, threads), loop);
  }
  const Reg target = gen::FMul(kb, u, total);
  const Label walked = kb.NewLabel("walked");
  const Reg reach = gen::FAdd(kb, prefix, mine);
  const Reg mine_has = kb.Emit(Op::kAnd, Type::kPred,
                               {kb.Setp(Cmp::kLe, Type::kF32, prefix, target),
                                kb.Setp(Cmp::kGt, Type::kF32, reach, target)});
  kb.BraIf(mine_has, walked, /*if_false=*/true);
  {
    const Reg cum = kb.Mov(Type::kF32, prefix);
    for_chunk(
        [&](Reg i, Reg w) {
          kb.EmitTo(cum, Op::kAdd, Type::kF32, {cum, w});
          const Reg hit = kb.Emit(Op::kAnd, Type::kPred,
                                  {kb.Setp(Cmp::kGt, Type::kF32, w, Operand::F32(0.0f)),
                                   kb.Setp(Cmp::kGt, Type::kF32, cum, target)});
          {
            auto g = kb.If(hit);
            kb.Red(Op::kAtomMin, Space::kShared, Type::kU32, Operand::Addr(pick_base), i);
          }
          kb.BraIf(hit, walked);
        },
        walked);
  }
  kb.Bind(walked);
  kb.BarSync();
  {
    const std::vector<Reg> pk = kb.Ld(Space::kShared, Type::kU32, Operand::Addr(pick_base), 2);
    const Reg id = kb.Selp(Type::kU32, pk[1], pk[0], kb.Setp(Cmp::kEq, Type::kU32, pk[0], kNone));
    auto g = kb.If(is_t0);
    kb.St(Space::kGlobal, Type::kU32, Operand::Addr(gen::AddrAdd(kb, out, row, 4)), {id});
  }
  kb.Bra(done);

  // Greedy: argmax with the sampler's tie rules.
  kb.Bind(greedy);
  {
    Reg v = kb.Mov(Type::kF32, Operand::F32(-INFINITY));
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
  return kb.Finish({absl::StrCat("kernel ", kSamplingEntry, ", config ", cfg.Key())});
}

}  // namespace ptxserve::kernels
