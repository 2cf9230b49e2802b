#include "kernels/attention_merge.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

// body() for s = 0 .. num_splits - 1 (the caller zeroes s); labels <name>_loop, <name>_done.
template <class Body>
void ForEachSplit(KernelBuilder& kb, const std::string& name, Reg s, Reg num_splits, Body body) {
  const ptx::Label loop = kb.NewLabel(name + "_loop");
  const ptx::Label done = kb.NewLabel(name + "_done");
  kb.BraIf(kb.Setp(Cmp::kEq, Type::kU32, num_splits, 0), done);
  kb.Bind(loop);
  body();
  kb.EmitTo(s, Op::kAdd, Type::kU32, {s, 1});
  kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, s, num_splits), loop);
  kb.Bind(done);
}

}  // namespace

int AttentionMergeConfig::Threads() const {
  return static_cast<int>(CeilDiv(head_dim / 4, 32) * 32);
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

    // No barriers: threads past the head's end and rows past the batch just leave.
    const ptx::Label exit = kb.NewLabel("exit");
    const Reg tid = kb.Special(SReg::kTidX);
    const Reg head = kb.Special(SReg::kCtaidX);
    const Reg row = kb.Special(SReg::kCtaidY);
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, row, num_rows), exit);
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, tid, hd / 4), exit);
    const Reg head_row = kb.Emit(Op::kMadLo, Type::kU32, {row, cfg.num_heads, head});
    const Reg base = kb.Emit(Op::kMulLo, Type::kU32, {head_row, num_splits});
    const Reg lse_row = gen::AddrAdd(kb, lse, base, 4);

    // Pass 1: the largest log-sum-exp.
    const Reg mx = kb.Mov(Type::kF32, Operand::F32(-INFINITY));
    const Reg s = kb.Mov(Type::kU32, 0);
    ForEachSplit(kb, "max", s, num_splits, [&] {
      const Reg v =
          kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, lse_row, s, 4)));
      kb.EmitTo(mx, Op::kMax, Type::kF32, {mx, v});
    });
    // All splits empty: any finite M makes every weight 2^-inf = 0.
    const Reg empty = kb.Setp(Cmp::kEq, Type::kF32, mx, Operand::F32(-INFINITY));
    kb.EmitTo(mx, Op::kSelp, Type::kF32, {Operand::F32(0.0f), mx, empty});

    // Pass 2: weighted sum of the partial outputs.
    const Reg sum = kb.Mov(Type::kF32, Operand::F32(0.0f));
    std::vector<Reg> o(4);
    for (Reg& r : o) r = kb.Mov(Type::kF32, Operand::F32(0.0f));
    const Reg part_row = gen::AddrAdd(kb, partial, base, int64_t{hd} * 4);
    const Reg part_lane = gen::AddrAdd(kb, part_row, tid, 16);
    kb.MovTo(s, 0);
    ForEachSplit(kb, "sum", s, num_splits, [&] {
      const Reg v =
          kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, lse_row, s, 4)));
      const Reg w = kb.Emit(Op::kEx2, Type::kF32, {gen::FSub(kb, v, mx)});
      kb.EmitTo(sum, Op::kAdd, Type::kF32, {sum, w});
      const Reg pa = gen::AddrAdd(kb, part_lane, s, int64_t{hd} * 4);
      const std::vector<Reg> pv = kb.Ld(Space::kGlobal, Type::kF32, Operand::Addr(pa), 4);
      for (int i = 0; i < 4; ++i) kb.EmitTo(o[i], Op::kFma, Type::kF32, {pv[i], w, o[i]});
    });
    const Reg nonempty = kb.Setp(Cmp::kGt, Type::kF32, sum, Operand::F32(0.0f));
    const Reg inv =
        kb.Selp(Type::kF32, kb.Emit(Op::kRcp, Type::kF32, {sum}), Operand::F32(0.0f), nonempty);
    for (Reg& r : o) kb.EmitTo(r, Op::kMul, Type::kF32, {r, inv});
    const Reg dst = gen::AddrAdd(kb, gen::AddrAdd(kb, out, head_row, int64_t{hd} * 4), tid, 16);
    kb.St(Space::kGlobal, Type::kF32, Operand::Addr(dst), o);
    kb.Bind(exit);
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels
