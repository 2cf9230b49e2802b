// Two phases per row, separated by one bar.sync (which orders the CTA's global stores):
// the strided copy of the row, then the entries, one per thread, each a read-modify-write
// of its own id (an id appears once per row, so no two threads touch the same element).
#include "kernels/penalties.h"

#include "absl/strings/str_cat.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

absl::StatusOr<std::string> GeneratePenalties(const PenaltiesConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const int threads = cfg.threads;
    const auto [logits, out, offsets, entries, repetition, presence, frequency, vocab, num_rows] =
        DeclareParams<PenaltiesArgs>(kb);

    const auto [row, done] = gen::EnterRow(kb, num_rows);
    const Reg tid = kb.Special(SReg::kTidX);
    const Reg row_off =
        kb.Emit(Op::kMulWide, Type::kU32, {row, kb.Emit(Op::kShl, Type::kB32, {vocab, 2})});
    const Reg src = kb.Emit(Op::kAdd, Type::kU64, {logits, row_off});
    const Reg dst = kb.Emit(Op::kAdd, Type::kU64, {out, row_off});

    // Phase 1: the copy.
    {
      const Reg i = kb.Mov(Type::kU32, tid);
      const Label loop = kb.NewLabel("copy");
      const Label end = kb.NewLabel("copy_end");
      kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, i, vocab), end);
      kb.Bind(loop);
      const Reg x = kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, src, i, 4)));
      kb.St(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, dst, i, 4)), {x});
      kb.EmitTo(i, Op::kAdd, Type::kU32, {i, threads});
      kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, i, vocab), loop);
      kb.Bind(end);
    }
    kb.BarSync();

    // Phase 2: the entries [begin, end), strided by the block (offsets are non-negative).
    const Reg off_addr = gen::AddrAdd(kb, offsets, row, 4);
    const Reg begin = kb.Ld1(Space::kGlobal, Type::kU32, Operand::Addr(off_addr));
    const Reg end = kb.Ld1(Space::kGlobal, Type::kU32, Operand::Addr(off_addr, 4));
    const Reg rp =
        kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, repetition, row, 4)));
    const Reg pres =
        kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, presence, row, 4)));
    const Reg freq =
        kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, frequency, row, 4)));
    const Reg e = kb.Emit(Op::kAdd, Type::kU32, {begin, tid});
    const Label loop = kb.NewLabel("entry");
    const Label next = kb.NewLabel("entry_next");
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, e, end), done);
    kb.Bind(loop);
    {
      const Reg base = gen::AddrAdd(kb, entries, e, sizeof(PenaltyEntryWords));
      const Reg id = kb.Ld1(Space::kGlobal, Type::kU32, Operand::Addr(base));
      const Reg count = kb.Ld1(Space::kGlobal, Type::kS32, Operand::Addr(base, 4));
      const Reg repeated = kb.Ld1(Space::kGlobal, Type::kS32, Operand::Addr(base, 8));
      // Unsigned compare: negative ids are past the vocab too.
      kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, id, vocab), next);
      const Reg addr = gen::AddrAdd(kb, dst, id, 4);
      const Reg x = kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(addr));
      {
        // x > 0 ? x / rp : x * rp; fma.rn(x, rp, -0) is the rounded product, signed zeros
        // included, and is never fused with anything.
        const Reg divided = kb.Emit(Op::kDiv, Type::kF32, {x, rp});
        const Reg multiplied = kb.Emit(Op::kFma, Type::kF32, {x, rp, Operand::F32(-0.0f)});
        const Reg penalised = kb.Selp(Type::kF32, divided, multiplied,
                                      kb.Setp(Cmp::kGt, Type::kF32, x, Operand::F32(0.0f)));
        const Reg rep = kb.Setp(Cmp::kNe, Type::kS32, repeated, 0);
        kb.EmitTo(x, Op::kSelp, Type::kF32, {penalised, x, rep});
      }
      {
        // x - fma(freq, count, pres): fma.rn(t, -1, x) is the rounded difference.
        const Reg c = kb.Cvt(Type::kF32, Type::kS32, count, ptx::Round::kRn);
        const Reg t = kb.Emit(Op::kFma, Type::kF32, {freq, c, pres});
        const Reg sub = kb.Emit(Op::kFma, Type::kF32, {t, Operand::F32(-1.0f), x});
        const Reg counted = kb.Setp(Cmp::kGt, Type::kS32, count, 0);
        kb.EmitTo(x, Op::kSelp, Type::kF32, {sub, x, counted});
      }
      kb.St(Space::kGlobal, Type::kF32, Operand::Addr(addr), {x});
    }
    kb.Bind(next);
    kb.EmitTo(e, Op::kAdd, Type::kU32, {e, threads});
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, e, end), loop);
    kb.Bind(done);
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels
