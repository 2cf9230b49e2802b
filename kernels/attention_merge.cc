#include "kernels/attention_merge.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

// Groups of head_dim / 4 threads that share a head's splits: group g merges splits g,
// g + kGroups, ...; the groups' results are added through shared memory in group order.
// Each group waits for its splits' loads one after the other, so more groups, fewer
// waits: 8 leave two of 16 splits (batch 1's plan) to a group. A multiple of 4.
constexpr int kGroups = 8;

// body() for s = first, first + kGroups, .. < num_splits (s starts at first);
// labels <name>_loop, <name>_done.
template <class Body>
void ForEachSplit(KernelBuilder& kb, const std::string& name, Reg s, Reg num_splits, Body body) {
  const ptx::Label loop = kb.NewLabel(name + "_loop");
  const ptx::Label done = kb.NewLabel(name + "_done");
  kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, s, num_splits), done);
  kb.Bind(loop);
  body();
  kb.EmitTo(s, Op::kAdd, Type::kU32, {s, kGroups});
  kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, s, num_splits), loop);
  kb.Bind(done);
}

}  // namespace

int AttentionMergeConfig::Threads() const {
  return static_cast<int>(CeilDiv(kGroups * head_dim / 4, 32) * 32);
}

LaunchDims AttentionMergeLaunch(const AttentionMergeConfig& cfg, int64_t num_rows) {
  LaunchDims d;
  d.grid = {static_cast<uint32_t>(cfg.num_heads),
            static_cast<uint32_t>(std::max<int64_t>(num_rows, 1)), 1};
  d.block = {static_cast<uint32_t>(cfg.Threads()), 1, 1};
  return d;
}

absl::StatusOr<std::string> GenerateAttentionMerge(const AttentionMergeConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const int hd = cfg.head_dim;
    const auto [partial, lse, out, num_splits, num_rows] = DeclareParams<AttentionMergeArgs>(kb);

    // Whole CTAs leave for rows past the batch; threads past the groups idle to the barriers.
    const int group_threads = hd / 4;
    const ptx::Label exit = kb.NewLabel("exit");
    const Reg tid = kb.Special(SReg::kTidX);
    const Reg head = kb.Special(SReg::kCtaidX);
    const Reg row = kb.Special(SReg::kCtaidY);
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, row, num_rows), exit);
    const Reg group = kb.Emit(Op::kDiv, Type::kU32, {tid, group_threads});
    const Reg lane = kb.Emit(Op::kRem, Type::kU32, {tid, group_threads});
    const Reg active = kb.Setp(Cmp::kLt, Type::kU32, group, kGroups);
    const Reg first = kb.Selp(Type::kU32, group, num_splits, active);
    const Reg head_row = kb.Emit(Op::kMadLo, Type::kU32, {row, cfg.num_heads, head});
    const Reg base = kb.Emit(Op::kMulLo, Type::kU32, {head_row, num_splits});
    const Reg lse_row = gen::AddrAdd(kb, lse, base, 4);
    // [kGroups] maxima, then [kGroups][hd + 4]: each group's weighted sum, its weight total
    // and padding that keeps the rows 16-byte aligned.
    const Reg shared = kb.AddressOf(kb.Shared("merge", int64_t{kGroups} * (hd + 4) * 4));

    // Pass 1: the largest log-sum-exp, per group, then over the groups.
    Reg mx = kb.Mov(Type::kF32, Operand::F32(-INFINITY));
    const Reg s = kb.Mov(Type::kU32, first);
    ForEachSplit(kb, "max", s, num_splits, [&] {
      const Reg v =
          kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, lse_row, s, 4)));
      kb.EmitTo(mx, Op::kMax, Type::kF32, {mx, v});
    });
    {
      auto g =
          kb.If(kb.Emit(Op::kAnd, Type::kPred, {active, kb.Setp(Cmp::kEq, Type::kU32, lane, 0)}));
      kb.St(Space::kShared, Type::kF32,
            Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {group, 4, shared})), {mx});
    }
    kb.BarSync();
    std::vector<Reg> maxima;
    for (int g = 0; g < kGroups; g += 4) {
      for (const Reg& m : kb.Ld(Space::kShared, Type::kF32, Operand::Addr(shared, 4 * g), 4)) {
        maxima.push_back(m);
      }
    }
    for (int g = 0; g < kGroups; ++g) {
      if (g == 0) {
        kb.MovTo(mx, maxima[0]);
      } else {
        kb.EmitTo(mx, Op::kMax, Type::kF32, {mx, maxima[g]});
      }
    }
    kb.BarSync();  // the maxima are read before pass 2's sums overwrite them
    // All splits empty: any finite M makes every weight 2^-inf = 0.
    const Reg empty = kb.Setp(Cmp::kEq, Type::kF32, mx, Operand::F32(-INFINITY));
    kb.EmitTo(mx, Op::kSelp, Type::kF32, {Operand::F32(0.0f), mx, empty});

    // Pass 2: each group's weighted sum of its partial outputs.
    const Reg sum = kb.Mov(Type::kF32, Operand::F32(0.0f));
    std::vector<Reg> o(4);
    for (Reg& r : o) r = kb.Mov(Type::kF32, Operand::F32(0.0f));
    const Reg part_row = gen::AddrAdd(kb, partial, base, int64_t{hd} * 4);
    const Reg part_lane = gen::AddrAdd(kb, part_row, lane, 16);
    kb.MovTo(s, first);
    ForEachSplit(kb, "sum", s, num_splits, [&] {
      const Reg v =
          kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, lse_row, s, 4)));
      const Reg w = kb.Emit(Op::kEx2, Type::kF32, {gen::FSub(kb, v, mx)});
      kb.EmitTo(sum, Op::kAdd, Type::kF32, {sum, w});
      const Reg pa = gen::AddrAdd(kb, part_lane, s, int64_t{hd} * 4);
      const std::vector<Reg> pv = kb.Ld(Space::kGlobal, Type::kF32, Operand::Addr(pa), 4);
      for (int i = 0; i < 4; ++i) kb.EmitTo(o[i], Op::kFma, Type::kF32, {pv[i], w, o[i]});
    });
    const Reg group_slot = kb.Emit(Op::kMadLo, Type::kU32, {group, (hd + 4) * 4, shared});
    {
      auto g = kb.If(active);
      kb.St(Space::kShared, Type::kF32,
            Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {lane, 16, group_slot})), o);
    }
    {
      auto g =
          kb.If(kb.Emit(Op::kAnd, Type::kPred, {active, kb.Setp(Cmp::kEq, Type::kU32, lane, 0)}));
      kb.St(Space::kShared, Type::kF32, Operand::Addr(group_slot, int64_t{hd} * 4), {sum});
    }
    kb.BarSync();
    // Group 0 adds the groups' sums in group order and writes the head's output.
    {
      auto g0 = kb.If(kb.Setp(Cmp::kEq, Type::kU32, group, 0));
      for (int g = 1; g < kGroups; ++g) {
        const int64_t at = int64_t{g} * (hd + 4) * 4;
        const std::vector<Reg> other =
            kb.Ld(Space::kShared, Type::kF32,
                  Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {lane, 16, shared}), at), 4);
        for (int i = 0; i < 4; ++i) kb.EmitTo(o[i], Op::kAdd, Type::kF32, {o[i], other[i]});
        kb.EmitTo(
            sum, Op::kAdd, Type::kF32,
            {sum, kb.Ld1(Space::kShared, Type::kF32, Operand::Addr(shared, at + int64_t{hd} * 4))});
      }
      const Reg nonempty = kb.Setp(Cmp::kGt, Type::kF32, sum, Operand::F32(0.0f));
      const Reg inv =
          kb.Selp(Type::kF32, kb.Emit(Op::kRcp, Type::kF32, {sum}), Operand::F32(0.0f), nonempty);
      for (Reg& r : o) kb.EmitTo(r, Op::kMul, Type::kF32, {r, inv});
      const int os = ElemSize(cfg.out_dtype);
      const Reg dst =
          gen::AddrAdd(kb, gen::AddrAdd(kb, out, head_row, int64_t{hd} * os), lane, 4 * os);
      gen::StoreFromF32(kb, cfg.out_dtype, dst, 0, o, 4 * os);
    }
    kb.Bind(exit);
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels
