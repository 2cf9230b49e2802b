// Instruction emitters of KernelBuilder: each checks its operands against the
// instruction table (forms.h) and the target before writing one line.
#include "absl/strings/str_cat.h"
#include "kernels/ptx/builder.h"

namespace ptxserve::ptx {
namespace {

Type Wide(Type t) {
  switch (t) {
    case Type::kU16:
      return Type::kU32;
    case Type::kS16:
      return Type::kS32;
    case Type::kU32:
      return Type::kU64;
    case Type::kS32:
      return Type::kS64;
    default:
      return t;
  }
}

Type BitsOfSize(int bits) {
  return bits == 16 ? Type::kB16 : (bits == 32 ? Type::kB32 : Type::kB64);
}

// Half-precision values move through memory and mov/selp as plain bits.
Type Storage(Type t) {
  if (t == Type::kF16 || t == Type::kBF16) return Type::kB16;
  if (t == Type::kF16x2 || t == Type::kBF16x2) return Type::kB32;
  return t;
}

constexpr absl::string_view kCmpName[] = {"eq",  "ne",  "lt",  "le",  "gt",  "ge",
                                          "lo",  "ls",  "hi",  "hs",  "equ", "neu",
                                          "ltu", "leu", "gtu", "geu", "num", "nan"};
constexpr absl::string_view kRoundName[] = {"", "rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi"};
constexpr absl::string_view kSpaceName[] = {"global", "shared", "param", "local"};
constexpr absl::string_view kShflName[] = {"up", "down", "bfly", "idx"};
constexpr absl::string_view kSRegName[] = {
    "%tid.x",   "%tid.y",   "%tid.z",    "%ntid.x",   "%ntid.y",   "%ntid.z", "%ctaid.x",
    "%ctaid.y", "%ctaid.z", "%nctaid.x", "%nctaid.y", "%nctaid.z", "%laneid"};

bool IsAtomic(Op op) { return op >= Op::kAtomAdd && op <= Op::kAtomXor; }

bool CmpFits(Cmp c, TypeKind k) {
  const int i = static_cast<int>(c);
  if (c == Cmp::kEq || c == Cmp::kNe) return true;
  if (k == TypeKind::kBits || k == TypeKind::kPred) return false;
  if (i <= static_cast<int>(Cmp::kGe)) return true;  // lt/le/gt/ge: ints and floats
  if (i <= static_cast<int>(Cmp::kHs)) return k == TypeKind::kUnsigned;
  return k == TypeKind::kFloat;
}

}  // namespace

Reg KernelBuilder::Emit(Op op, Type t, std::initializer_list<Operand> srcs) {
  const Form* f = FindForm(op, t);
  Type dt = t;
  if (f != nullptr && f->sig[0] == 'w') dt = Wide(t);
  if (f != nullptr && f->sig[0] == 'P') dt = Type::kPred;
  const Reg dst = NewReg(dt);
  EmitTo(dst, op, t, srcs);
  return dst;
}

void KernelBuilder::EmitTo(Reg dst, Op op, Type t, std::initializer_list<Operand> srcs) {
  if (!ok()) return;
  const Form* f = FindForm(op, t);
  const std::string what = absl::StrCat(OpName(op), ".", TypeName(t));
  if (f == nullptr) return Fail(absl::StrCat("no instruction form ", what));
  if (op == Op::kSetp || op == Op::kShfl || op >= Op::kAtomAdd) {
    return Fail(absl::StrCat(what, " needs its own emitter (Setp/Shfl/Atom/Mma/Ldmatrix/CpAsync)"));
  }
  if (!Require(f->min_sm, f->min_ptx, what)) return;
  if (f->sig.size() != srcs.size() + 1) {
    return Fail(absl::StrCat(what, " takes ", f->sig.size() - 1, " sources, got ", srcs.size()));
  }
  const Type dst_type = f->sig[0] == 'w' ? Wide(t) : (f->sig[0] == 'P' ? Type::kPred : t);
  if (!CheckDst(dst, dst_type, what)) return;
  std::vector<std::string> ops = {dst.Name()};
  size_t i = 1;
  for (const Operand& o : srcs) {
    const char role = f->sig[i++];
    const bool imm = !IsHalfFloat(t);
    bool good = false;
    switch (role) {
      case 's':
        good = CheckOperand(o, t, imm, what);
        break;
      case 'x':
        good = CheckOperand(o, Wide(t), imm, what);
        break;
      case 'u':
        good = CheckOperand(o, Type::kU32, true, what);
        break;
      case 'p':
        good = CheckOperand(o, Type::kPred, false, what);
        break;
      default:
        Fail(absl::StrCat(what, ": bad table role '", std::string(1, role), "'"));
    }
    if (!good) return;
    ops.push_back(o.Text());
  }
  Line(absl::StrCat(f->text, ".", TypeName(t)), ops);
}

Reg KernelBuilder::Setp(Cmp cmp, Type t, const Operand& a, const Operand& b) {
  const Reg dst = NewReg(Type::kPred);
  const std::string what = absl::StrCat("setp.", kCmpName[static_cast<int>(cmp)], ".", TypeName(t));
  const Form* f = FindForm(Op::kSetp, t);
  if (f == nullptr) {
    Fail(absl::StrCat("no instruction form ", what));
  } else if (!CmpFits(cmp, KindOf(t))) {
    Fail(absl::StrCat(what, ": comparison does not apply to this type"));
  } else if (Require(f->min_sm, f->min_ptx, what) && CheckOperand(a, t, !IsHalfFloat(t), what) &&
             CheckOperand(b, t, !IsHalfFloat(t), what)) {
    Line(what, {dst.Name(), a.Text(), b.Text()});
  }
  return dst;
}

Reg KernelBuilder::Mov(Type t, const Operand& src) {
  const Reg dst = NewReg(t);
  MovTo(dst, src);
  return dst;
}

void KernelBuilder::MovTo(Reg dst, const Operand& src) {
  const Type t = Storage(dst.type);
  if (!CheckDst(dst, t, "mov")) return;
  if (src.kind() == Operand::Kind::kSymbol) {
    return Fail("mov of a symbol: use AddressOf()");
  }
  if (!CheckOperand(src, t, true, absl::StrCat("mov.", TypeName(t)))) return;
  Line(absl::StrCat("mov.", TypeName(t)), {dst.Name(), src.Text()});
}

Reg KernelBuilder::Selp(Type t, const Operand& a, const Operand& b, Reg p) {
  return Emit(Op::kSelp, Storage(t), {a, b, p});
}

Reg KernelBuilder::Cvt(Type dst, Type src, const Operand& a, Round r) {
  const Reg d = NewReg(dst);
  CvtTo(d, src, a, r);
  return d;
}

void KernelBuilder::CvtTo(Reg dst, Type src, const Operand& a, Round r) {
  const Type dt = dst.type;
  const std::string rn =
      r == Round::kNone ? "" : absl::StrCat(".", kRoundName[static_cast<int>(r)]);
  const std::string what = absl::StrCat("cvt", rn, ".", TypeName(dt), ".", TypeName(src));
  const TypeKind dk = KindOf(dt);
  const TypeKind sk = KindOf(src);
  const bool dint = dk == TypeKind::kUnsigned || dk == TypeKind::kSigned;
  const bool sint = sk == TypeKind::kUnsigned || sk == TypeKind::kSigned;
  const bool dflt = dk == TypeKind::kFloat && dt != Type::kF16x2 && dt != Type::kBF16x2;
  const bool sflt = sk == TypeKind::kFloat && src != Type::kF16x2 && src != Type::kBF16x2;
  const bool float_round = r >= Round::kRn && r <= Round::kRp;
  const bool int_round = r >= Round::kRni;
  int min_sm = 20;
  int min_ptx = 40;
  std::string bad;
  if (dint && sint) {
    if (r != Round::kNone) bad = "integer conversions take no rounding";
  } else if (dflt && sint) {
    if (!float_round) bad = "int -> float needs .rn/.rz/.rm/.rp";
    if (dt == Type::kF16 || dt == Type::kBF16) bad = "int -> half is not supported";
  } else if (dint && sflt) {
    if (!int_round) bad = "float -> int needs .rni/.rzi/.rmi/.rpi";
    if (src == Type::kBF16) min_sm = 90, min_ptx = 78;
  } else if (dflt && sflt) {
    const int db = TypeBits(dt);
    const int sb = TypeBits(src);
    if (dt == src) {
      if (!int_round) bad = "float -> same float rounds to an integer (.rni...)";
    } else if ((dt == Type::kF16 && src == Type::kBF16) ||
               (dt == Type::kBF16 && src == Type::kF16)) {
      bad = "f16 <-> bf16 is not supported";
    } else if (db > sb) {
      if (r != Round::kNone) bad = "widening takes no rounding";
      if (src == Type::kBF16) min_sm = 90, min_ptx = 78;
    } else {
      if (!float_round) bad = "narrowing needs .rn/.rz/.rm/.rp";
      if (dt == Type::kBF16) min_sm = 80, min_ptx = 70;
    }
  } else {
    bad = "unsupported type pair";
  }
  if (!bad.empty()) return Fail(absl::StrCat(what, ": ", bad));
  if (!Require(min_sm, min_ptx, what) || !CheckDst(dst, dt, what) ||
      !CheckOperand(a, src, !IsHalfFloat(src), what)) {
    return;
  }
  Line(what, {dst.Name(), a.Text()});
}

Reg KernelBuilder::CvtPack(Type packed, const Operand& hi, const Operand& lo) {
  const Reg d = NewReg(packed);
  const std::string what = absl::StrCat("cvt.rn.", TypeName(packed), ".f32");
  if (packed != Type::kF16x2 && packed != Type::kBF16x2) {
    Fail(absl::StrCat(what, ": not a packed half type"));
  } else if (Require(80, 70, what) && CheckOperand(hi, Type::kF32, true, what) &&
             CheckOperand(lo, Type::kF32, true, what)) {
    Line(what, {d.Name(), hi.Text(), lo.Text()});
  }
  return d;
}

Reg KernelBuilder::Pack(Type wide, std::initializer_list<Reg> parts) {
  const Reg d = NewReg(wide);
  const Type w = BitsOfSize(TypeBits(wide));
  if (parts.size() < 2 || TypeBits(w) % static_cast<int>(parts.size()) != 0) {
    Fail("pack: part count does not divide the width");
    return d;
  }
  const int pb = TypeBits(w) / static_cast<int>(parts.size());
  for (const Reg& p : parts) {
    if (TypeBits(p.type) != pb || p.type == Type::kPred) {
      Fail(absl::StrCat("pack into .", TypeName(wide), ": part ", p.Name(), " is not ", pb,
                        " bits"));
      return d;
    }
  }
  Line(absl::StrCat("mov.", TypeName(w)), {d.Name(), Operand::Vec(parts).Text()});
  return d;
}

std::vector<Reg> KernelBuilder::Unpack(Reg wide, Type part) {
  const int n = TypeBits(wide.type) / TypeBits(part);
  std::vector<Reg> parts;
  for (int i = 0; i < n; ++i) parts.push_back(NewReg(part));
  const Type w = BitsOfSize(TypeBits(wide.type));
  if (n < 2 || wide.type == Type::kPred || TypeBits(wide.type) % TypeBits(part) != 0) {
    Fail(absl::StrCat("unpack of ", wide.Name(), " into .", TypeName(part), " is not supported"));
    return parts;
  }
  Line(absl::StrCat("mov.", TypeName(w)), {Operand::Vec(parts).Text(), wide.Name()});
  return parts;
}

Reg KernelBuilder::Special(SReg s) {
  const Reg d = NewReg(Type::kU32);
  Line("mov.u32", {d.Name(), std::string(kSRegName[static_cast<int>(s)])});
  return d;
}

Reg KernelBuilder::AddressOf(const Symbol& s) {
  const Reg d = NewReg(Type::kU32);
  Line("mov.u32", {d.Name(), s.name});
  return d;
}

std::vector<Reg> KernelBuilder::Ld(Space sp, Type t, const Operand& addr, int vec, CacheOp cache) {
  std::vector<Reg> dsts;
  for (int i = 0; i < std::max(vec, 1); ++i) dsts.push_back(NewReg(t));
  LdTo(sp, t, addr, dsts, cache);
  return dsts;
}

Reg KernelBuilder::Ld1(Space sp, Type t, const Operand& addr, CacheOp cache) {
  return Ld(sp, t, addr, 1, cache)[0];
}

// Address operands: global memory through 64-bit registers, shared memory through
// 32-bit (shared-window) or 64-bit registers or a shared symbol, params by symbol.
bool KernelBuilder::AddrOk(Space sp, const Operand& a) {
  if (a.kind() != Operand::Kind::kAddr) return false;
  if (!a.addr_has_reg()) return sp == Space::kShared || sp == Space::kParam;
  const Type t = a.reg().type;
  const bool int_reg = KindOf(t) != TypeKind::kFloat && t != Type::kPred;
  if (sp == Space::kGlobal) return int_reg && TypeBits(t) == 64;
  if (sp == Space::kShared) return int_reg && (TypeBits(t) == 32 || TypeBits(t) == 64);
  return false;
}

void KernelBuilder::LdTo(Space sp, Type t, const Operand& addr, const std::vector<Reg>& dsts,
                         CacheOp cache) {
  const int vec = static_cast<int>(dsts.size());
  const Type st = Storage(t);
  const std::string vs = vec > 1 ? absl::StrCat(".v", vec) : "";
  const bool nc = cache == CacheOp::kNonCoherent;
  const std::string what =
      absl::StrCat("ld.", kSpaceName[static_cast<int>(sp)], nc ? ".nc" : "", vs, ".", TypeName(st));
  if (nc && sp != Space::kGlobal) return Fail(absl::StrCat(what, ": .nc is for global loads"));
  if (vec != 1 && vec != 2 && vec != 4) return Fail(absl::StrCat(what, ": vector width ", vec));
  if (t == Type::kPred || TypeBits(t) * vec > 128) {
    return Fail(absl::StrCat(what, ": wider than 128 bits or a predicate"));
  }
  if (sp == Space::kLocal || (sp == Space::kParam && vec != 1)) {
    return Fail(absl::StrCat(what, ": unsupported state space form"));
  }
  if (!AddrOk(sp, addr)) return Fail(absl::StrCat(what, ": bad address ", addr.Text()));
  for (const Reg& d : dsts) {
    if (!CheckDst(d, st, what)) return;
  }
  Line(what, {vec == 1 ? dsts[0].Name() : Operand::Vec(dsts).Text(), addr.Text()});
}

void KernelBuilder::St(Space sp, Type t, const Operand& addr, const std::vector<Reg>& vals) {
  const int vec = static_cast<int>(vals.size());
  const Type st = Storage(t);
  const std::string vs = vec > 1 ? absl::StrCat(".v", vec) : "";
  const std::string what =
      absl::StrCat("st.", kSpaceName[static_cast<int>(sp)], vs, ".", TypeName(st));
  if (vec != 1 && vec != 2 && vec != 4) return Fail(absl::StrCat(what, ": vector width ", vec));
  if (t == Type::kPred || TypeBits(t) * vec > 128) {
    return Fail(absl::StrCat(what, ": wider than 128 bits or a predicate"));
  }
  if (sp != Space::kGlobal && sp != Space::kShared) {
    return Fail(absl::StrCat(what, ": unsupported state space"));
  }
  if (!AddrOk(sp, addr)) return Fail(absl::StrCat(what, ": bad address ", addr.Text()));
  for (const Reg& v : vals) {
    if (!CheckOperand(Operand(v), st, false, what)) return;
  }
  Line(what, {addr.Text(), vec == 1 ? vals[0].Name() : Operand::Vec(vals).Text()});
}

Reg KernelBuilder::Atom(Op op, Space sp, Type t, const Operand& addr, const Operand& b,
                        const Operand& c) {
  const Reg d = NewReg(t);
  const Form* f = FindForm(op, t);
  const std::string what =
      absl::StrCat("atom.", kSpaceName[static_cast<int>(sp)], ".", OpName(op), ".", TypeName(t));
  if (f == nullptr || !IsAtomic(op)) {
    Fail(absl::StrCat("no form ", what));
    return d;
  }
  if (!Require(f->min_sm, f->min_ptx, what)) return d;
  if ((sp != Space::kGlobal && sp != Space::kShared) || !AddrOk(sp, addr)) {
    Fail(absl::StrCat(what, ": bad space or address ", addr.Text()));
    return d;
  }
  const bool cas = op == Op::kAtomCas;
  if (cas == (c.kind() == Operand::Kind::kNone)) {
    Fail(absl::StrCat(what, ": cas takes two values, the others one"));
    return d;
  }
  if (!CheckOperand(b, t, true, what) || (cas && !CheckOperand(c, t, true, what))) return d;
  std::vector<std::string> ops = {d.Name(), addr.Text(), b.Text()};
  if (cas) ops.push_back(c.Text());
  Line(what, ops);
  return d;
}

void KernelBuilder::Red(Op op, Space sp, Type t, const Operand& addr, const Operand& b) {
  const Form* f = FindForm(op, t);
  const std::string what =
      absl::StrCat("red.", kSpaceName[static_cast<int>(sp)], ".", OpName(op), ".", TypeName(t));
  if (f == nullptr || !IsAtomic(op) || op == Op::kAtomCas || op == Op::kAtomExch) {
    return Fail(absl::StrCat("no form ", what));
  }
  if (!Require(f->min_sm, f->min_ptx, what)) return;
  if ((sp != Space::kGlobal && sp != Space::kShared) || !AddrOk(sp, addr)) {
    return Fail(absl::StrCat(what, ": bad space or address ", addr.Text()));
  }
  if (!CheckOperand(b, t, true, what)) return;
  Line(what, {addr.Text(), b.Text()});
}

Reg KernelBuilder::Shfl(ShflMode mode, Reg val, const Operand& b, int c, const Operand& mask) {
  const Reg d = NewReg(val.type);
  const std::string what = absl::StrCat("shfl.sync.", kShflName[static_cast<int>(mode)], ".b32");
  if (c < 0) c = mode == ShflMode::kUp ? 0 : 31;
  if (!Require(30, 60, what) || !CheckOperand(Operand(val), Type::kB32, false, what) ||
      !CheckOperand(b, Type::kU32, true, what) || !CheckOperand(mask, Type::kB32, true, what)) {
    return d;
  }
  Line(what, {d.Name(), val.Name(), b.Text(), absl::StrCat(c), mask.Text()});
  return d;
}

void KernelBuilder::BarSync(int barrier) {
  if (barrier < 0 || barrier > 15) return Fail(absl::StrCat("bar.sync ", barrier, ": id > 15"));
  if (!guard_.empty()) return Fail("bar.sync under a guard: every thread must reach it");
  Line("bar.sync", {absl::StrCat(barrier)});
}

void KernelBuilder::MembarGl() { Line("membar.gl", {}); }

void KernelBuilder::GridDepLaunchDependents() {
  const Form* f = FindUntypedForm(Op::kGridDepLaunchDependents);
  if (Require(f->min_sm, f->min_ptx, f->text)) Line(f->text, {});
}

void KernelBuilder::GridDepWait() {
  const Form* f = FindUntypedForm(Op::kGridDepWait);
  if (Require(f->min_sm, f->min_ptx, f->text)) Line(f->text, {});
}

void KernelBuilder::PrefetchL2(const Operand& addr) {
  if (!AddrOk(Space::kGlobal, addr)) {
    return Fail(absl::StrCat("prefetch.global.L2: bad address ", addr.Text()));
  }
  Line("prefetch.global.L2", {addr.Text()});
}

}  // namespace ptxserve::ptx
