// Tensor-core (mma, ldmatrix) and asynchronous-copy (cp.async) emitters of KernelBuilder.
// Each takes its sm / PTX ISA gate from the instruction table (forms.h).
#include "absl/strings/str_cat.h"
#include "kernels/ptx/builder.h"

namespace ptxserve::ptx {

void KernelBuilder::MmaTo(const std::vector<Reg>& d, MmaShape shape, Type ab,
                          const std::vector<Reg>& a, const std::vector<Reg>& b,
                          const std::vector<Reg>& c) {
  if (!ok()) return;
  const bool k16 = shape == MmaShape::kM16N8K16;
  const Op op = k16 ? Op::kMmaM16N8K16 : Op::kMmaM16N8K8;
  const Form* f = FindForm(op, ab);
  const std::string what =
      absl::StrCat(OpName(op), ".f32.", TypeName(ab), ".", TypeName(ab), ".f32");
  if (f == nullptr) return Fail(absl::StrCat(what, ": inputs must be f16 or bf16"));
  if (!Require(f->min_sm, f->min_ptx, what)) return;
  if (!guard_.empty()) return Fail(absl::StrCat(what, " under a guard: every lane must run it"));
  const size_t want_a = k16 ? 4 : 2, want_b = k16 ? 2 : 1;
  if (a.size() != want_a || b.size() != want_b || c.size() != 4 || d.size() != 4) {
    return Fail(absl::StrCat(what, " takes 4 d, ", want_a, " a, ", want_b,
                             " b and 4 c registers, got ", d.size(), ", ", a.size(), ", ", b.size(),
                             ", ", c.size()));
  }
  for (const Reg& r : d) {
    if (!CheckDst(r, Type::kF32, what)) return;
  }
  for (const std::vector<Reg>* v : {&a, &b}) {
    for (const Reg& r : *v) {
      if (!CheckOperand(r, Type::kB32, false, what)) return;
    }
  }
  for (const Reg& r : c) {
    if (!CheckOperand(r, Type::kF32, false, what)) return;
  }
  Line(what, {Operand::Vec(d).Text(), Operand::Vec(a).Text(), Operand::Vec(b).Text(),
              Operand::Vec(c).Text()});
}

std::vector<Reg> KernelBuilder::Mma(MmaShape shape, Type ab, const std::vector<Reg>& a,
                                    const std::vector<Reg>& b, const std::vector<Reg>& c) {
  std::vector<Reg> d;
  for (int i = 0; i < 4; ++i) d.push_back(NewReg(Type::kF32));
  MmaTo(d, shape, ab, a, b, c);
  return d;
}

std::vector<Reg> KernelBuilder::Ldmatrix(int num, bool trans, const Operand& shared_addr) {
  std::vector<Reg> d;
  for (int i = 0; i < std::max(num, 1); ++i) d.push_back(NewReg(Type::kB32));
  const Form* f = FindForm(Op::kLdmatrix, Type::kB16);
  const std::string what = absl::StrCat(f->text, ".x", num, trans ? ".trans" : "", ".shared.b16");
  if (num != 1 && num != 2 && num != 4) {
    Fail(absl::StrCat(what, ": loads 1, 2 or 4 matrices"));
  } else if (!guard_.empty()) {
    Fail(absl::StrCat(what, " under a guard: every lane must run it"));
  } else if (!AddrOk(Space::kShared, shared_addr)) {
    Fail(absl::StrCat(what, ": bad shared address ", shared_addr.Text()));
  } else if (Require(f->min_sm, f->min_ptx, what)) {
    Line(what, {Operand::Vec(d).Text(), shared_addr.Text()});
  }
  return d;
}

void KernelBuilder::CpAsync(CpAsyncCache cache, const Operand& shared_dst,
                            const Operand& global_src, int bytes, const Operand& src_size) {
  const Form* f = FindUntypedForm(cache == CpAsyncCache::kCg ? Op::kCpAsyncCg : Op::kCpAsyncCa);
  const std::string what(f->text);
  if (!Require(f->min_sm, f->min_ptx, what)) return;
  if (bytes != 4 && bytes != 8 && bytes != 16) {
    return Fail(absl::StrCat(what, ": copies 4, 8 or 16 bytes, not ", bytes));
  }
  if (cache == CpAsyncCache::kCg && bytes != 16) {
    return Fail(absl::StrCat(what, ": .cg copies 16 bytes, not ", bytes));
  }
  if (!AddrOk(Space::kShared, shared_dst)) {
    return Fail(absl::StrCat(what, ": bad shared destination ", shared_dst.Text()));
  }
  if (!AddrOk(Space::kGlobal, global_src)) {
    return Fail(absl::StrCat(what, ": bad global source ", global_src.Text()));
  }
  std::vector<std::string> ops = {shared_dst.Text(), global_src.Text(), absl::StrCat(bytes)};
  if (src_size.kind() != Operand::Kind::kNone) {
    if (!CheckOperand(src_size, Type::kU32, true, what)) return;
    if (src_size.kind() == Operand::Kind::kImmInt &&
        (src_size.imm() < 0 || src_size.imm() > bytes)) {
      return Fail(absl::StrCat(what, ": src-size ", src_size.imm(), " is not in 0..", bytes));
    }
    ops.push_back(src_size.Text());
  }
  Line(what, ops);
}

void KernelBuilder::CpAsyncCommit() {
  const Form* f = FindUntypedForm(Op::kCpAsyncCommit);
  if (Require(f->min_sm, f->min_ptx, f->text)) Line(f->text, {});
}

void KernelBuilder::CpAsyncWait(int n) {
  const Form* f = FindUntypedForm(Op::kCpAsyncWait);
  if (n < 0) return Fail(absl::StrCat(f->text, " ", n, ": the group count is negative"));
  if (Require(f->min_sm, f->min_ptx, f->text)) Line(f->text, {absl::StrCat(n)});
}

void KernelBuilder::CpAsyncWaitAll() {
  const Form* f = FindUntypedForm(Op::kCpAsyncWaitAll);
  if (Require(f->min_sm, f->min_ptx, f->text)) Line(f->text, {});
}

}  // namespace ptxserve::ptx
