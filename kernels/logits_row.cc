#include "kernels/logits_row.h"

#include "kernels/generator.h"

namespace ptxserve::kernels::gen {

Reg LoadLogit(const LogitsRow& c, Reg i) {
  return c.kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(AddrAdd(c.kb, c.row_base, i, 4)));
}

void ForStrided(const LogitsRow& c, const std::function<void(Reg i, Reg l)>& body) {
  KernelBuilder& kb = c.kb;
  const Reg i = kb.Mov(Type::kU32, c.tid);
  const Label loop = kb.NewLabel("strided");
  const Label end = kb.NewLabel("strided_end");
  kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, i, c.vocab), end);
  kb.Bind(loop);
  body(i, LoadLogit(c, i));
  kb.EmitTo(i, Op::kAdd, Type::kU32, {i, c.threads});
  kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, i, c.vocab), loop);
  kb.Bind(end);
}

}  // namespace ptxserve::kernels::gen
