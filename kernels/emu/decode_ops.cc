// Per-opcode decode rules: accepted modifiers, operand shapes and types, and the handler
// each combination maps to. A combination without a handler is an error naming the line.
#include "absl/strings/str_cat.h"
#include "kernels/emu/decoder.h"

namespace ptxserve::emu {
namespace {

Ty WideTy(Ty t) {
  switch (t) {
    case Ty::kU16:
      return Ty::kU32;
    case Ty::kS16:
      return Ty::kS32;
    case Ty::kU32:
      return Ty::kU64;
    case Ty::kS32:
      return Ty::kS64;
    default:
      return Ty::kNone;
  }
}
// 1 when a membermask operand is an immediate (the same in every lane).
uint8_t UniformFlag(const RawOperand& o) { return o.kind == RawOperand::kInt ? 1 : 0; }
bool IsHalfTy(Ty t) {
  return t == Ty::kF16 || t == Ty::kF16x2 || t == Ty::kBF16 || t == Ty::kBF16x2;
}

}  // namespace

absl::Status Decoder::Alu() {
  if (auto s = ParseMods(kMType | kMRound | kMFtz | kMSat | kMApprox | kMWidth); !s.ok()) return s;
  if (auto s = NeedTypes(1); !s.ok()) return s;
  const Ty t = m_.types[0];
  if (t == Ty::kPred) {
    if (op_ != Op::kAnd && op_ != Op::kOr && op_ != Op::kXor && op_ != Op::kNot) {
      return Err("'%s' does not take .pred operands", r_.opcode);
    }
    const size_t n = op_ == Op::kNot ? 2 : 3;
    if (auto s = NeedOps(n); !s.ok()) return s;
    if (auto s = PredDst(0, r_.ops[0]); !s.ok()) return s;
    for (size_t i = 1; i < n; ++i) {
      if (auto s = PredSrc(static_cast<int>(i - 1), r_.ops[i]); !s.ok()) return s;
    }
    in_.fn = SelectPredLogic(op_);
    return absl::OkStatus();
  }
  const bool is_float = TyIsFloat(t);
  if (is_float && m_.width != Width::kNone) return Err(".lo/.hi/.wide need an integer type");
  if (!is_float && (m_.rnd != Round::kNone || m_.ftz || m_.approx || m_.full)) {
    return Err("rounding, .ftz and .approx need a floating-point type");
  }
  if (!is_float && (op_ == Op::kMul || op_ == Op::kMad) && m_.width == Width::kNone) {
    return Err("integer %s needs .lo, .hi or .wide", r_.opcode);
  }
  if (m_.width != Width::kNone && op_ != Op::kMul && op_ != Op::kMad) {
    return Err(".lo/.hi/.wide apply only to mul and mad");
  }
  const bool wide = m_.width == Width::kWide;
  const Ty wt = wide ? WideTy(t) : t;
  if (wide && wt == Ty::kNone) return Err(".wide needs a 16- or 32-bit integer type");
  absl::Status st;
  switch (op_) {
    case Op::kAdd:
    case Op::kSub:
    case Op::kMin:
    case Op::kMax:
    case Op::kAnd:
    case Op::kOr:
    case Op::kXor:
    case Op::kDiv:
    case Op::kRem:
    case Op::kCopysign:
    case Op::kMul:
      if (!(st = NeedOps(3)).ok() || !(st = SetDst(0, 0, wt)).ok() ||
          !(st = SetSrc(0, 1, t)).ok() || !(st = SetSrc(1, 2, t)).ok()) {
        return st;
      }
      break;
    case Op::kMad:
    case Op::kFma:
      if (!(st = NeedOps(4)).ok() || !(st = SetDst(0, 0, wt)).ok() ||
          !(st = SetSrc(0, 1, t)).ok() || !(st = SetSrc(1, 2, t)).ok() ||
          !(st = SetSrc(2, 3, wt)).ok()) {
        return st;
      }
      break;
    case Op::kPopc:
    case Op::kClz:
      if (!(st = NeedOps(2)).ok() || !(st = SetDst(0, 0, Ty::kU32)).ok() ||
          !(st = SetSrc(0, 1, t)).ok()) {
        return st;
      }
      break;
    case Op::kShl:
    case Op::kShr:
      if (!(st = NeedOps(3)).ok() || !(st = SetDst(0, 0, t)).ok() || !(st = SetSrc(0, 1, t)).ok() ||
          !(st = SetSrc(1, 2, Ty::kU32)).ok()) {
        return st;
      }
      break;
    case Op::kBfe:
      if (!(st = NeedOps(4)).ok() || !(st = SetDst(0, 0, t)).ok() || !(st = SetSrc(0, 1, t)).ok() ||
          !(st = SetSrc(1, 2, Ty::kU32)).ok() || !(st = SetSrc(2, 3, Ty::kU32)).ok()) {
        return st;
      }
      break;
    case Op::kBfi:
      if (!(st = NeedOps(5)).ok() || !(st = SetDst(0, 0, t)).ok() || !(st = SetSrc(0, 1, t)).ok() ||
          !(st = SetSrc(1, 2, t)).ok() || !(st = SetSrc(2, 3, Ty::kU32)).ok() ||
          !(st = SetSrc(3, 4, Ty::kU32)).ok()) {
        return st;
      }
      break;
    case Op::kPrmt:
      if (!(st = NeedOps(4)).ok() || !(st = SetDst(0, 0, t)).ok() || !(st = SetSrc(0, 1, t)).ok() ||
          !(st = SetSrc(1, 2, t)).ok() || !(st = SetSrc(2, 3, t)).ok()) {
        return st;
      }
      break;
    case Op::kSelp:
      if (!(st = NeedOps(4)).ok() || !(st = SetDst(0, 0, t)).ok() || !(st = SetSrc(0, 1, t)).ok() ||
          !(st = SetSrc(1, 2, t)).ok() || !(st = PredSrc(0, r_.ops[3])).ok()) {
        return st;
      }
      break;
    default:  // unary
      if (!(st = NeedOps(2)).ok() || !(st = SetDst(0, 0, t)).ok() || !(st = SetSrc(0, 1, t)).ok()) {
        return st;
      }
      break;
  }
  OpSel sel;
  sel.op = op_;
  sel.type = t;
  sel.width = m_.width;
  sel.rnd = m_.rnd;
  sel.ftz = m_.ftz;
  sel.sat = m_.sat;
  sel.approx = m_.approx;
  sel.full = m_.full;
  if (op_ == Op::kSelp) {
    in_.fn = SelectIntOp(sel);
  } else if (IsHalfTy(t)) {
    in_.fn = SelectHalfOp(sel);
  } else if (is_float) {
    in_.fn = SelectFloatOp(sel);
  } else {
    in_.fn = SelectIntOp(sel);
  }
  if (in_.fn == nullptr) return Err("unsupported combination of type and modifiers");
  return absl::OkStatus();
}

absl::Status Decoder::Setp() {
  if (auto s = ParseMods(kMType | kMCmp | kMBool | kMFtz); !s.ok()) return s;
  if (auto s = NeedTypes(1); !s.ok()) return s;
  if (!m_.has_cmp) return Err("missing comparison (.eq, .lt, ...)");
  const Ty t = m_.types[0];
  const bool is_float = TyIsFloat(t);
  const Cmp c = m_.cmp;
  if (is_float && (c == Cmp::kLo || c == Cmp::kLs || c == Cmp::kHi || c == Cmp::kHs)) {
    return Err("unsigned comparisons need an integer type");
  }
  if (!is_float && c >= Cmp::kEqu) return Err("unordered comparisons need a floating type");
  const bool has_c = m_.bop != BoolOp::kNone;
  if (auto s = NeedOps(has_c ? 4 : 3); !s.ok()) return s;
  const RawOperand& d = r_.ops[0];
  if (d.kind != RawOperand::kReg || !d.reg.pred || d.neg) {
    return Err("destination must be a predicate register");
  }
  in_.pd[0] = d.reg.index;
  if (d.has_reg2) {
    if (!d.reg2.pred) return Err("second destination must be a predicate register");
    in_.pd[1] = d.reg2.index;
    in_.has_pd2 = true;
  }
  if (auto s = SetSrc(0, 1, t); !s.ok()) return s;
  if (auto s = SetSrc(1, 2, t); !s.ok()) return s;
  if (has_c) {
    if (auto s = PredSrc(0, r_.ops[3]); !s.ok()) return s;
  }
  in_.mode = static_cast<uint8_t>(c);
  in_.mode2 = static_cast<uint8_t>(m_.bop);
  in_.fn = SelectSetp(t);
  if (in_.fn == nullptr) return Err("unsupported type for setp");
  return absl::OkStatus();
}

absl::Status Decoder::Mov() {
  if (auto s = ParseMods(kMType); !s.ok()) return s;
  if (auto s = NeedTypes(1); !s.ok()) return s;
  if (auto s = NeedOps(2); !s.ok()) return s;
  const Ty t = m_.types[0];
  const RawOperand& d = r_.ops[0];
  const RawOperand& a = r_.ops[1];
  if (t == Ty::kPred) {
    if (auto s = PredDst(0, d); !s.ok()) return s;
    if (auto s = PredSrc(0, a); !s.ok()) return s;
    in_.fn = SelectPredLogic(Op::kMov);
    return absl::OkStatus();
  }
  if (d.kind == RawOperand::kVec || a.kind == RawOperand::kVec) {
    const bool pack = a.kind == RawOperand::kVec;
    const RawOperand& v = pack ? a : d;
    const int n = static_cast<int>(v.elems.size());
    const int total = TySize(t);
    if ((n != 2 && n != 4) || total % n != 0 || total / n < 1 || !TyIsBits(t)) {
      return Err("mov packing needs .b32/.b64 and 2 or 4 elements");
    }
    const int esize = total / n;
    const Ty et = esize == 1 ? Ty::kB8 : esize == 2 ? Ty::kB16 : Ty::kB32;
    in_.vec = static_cast<uint8_t>(n);
    in_.size = static_cast<uint8_t>(esize);
    for (int e = 0; e < n; ++e) {
      if (pack) {
        if (v.elems[e].kind == RawOperand::kSink) return Err("'_' cannot be a source");
        auto s = Src(v.elems[e], et);
        if (!s.ok()) return s.status();
        in_.s[e] = *s;
      } else {
        auto s = Dst(v.elems[e], et);
        if (!s.ok()) return s.status();
        in_.d[e] = *s;
      }
    }
    if (pack) {
      if (auto s = SetDst(0, 0, t); !s.ok()) return s;
    } else {
      if (auto s = SetSrc(0, 1, t); !s.ok()) return s;
    }
    in_.fn = SelectMovPack(pack);
    return absl::OkStatus();
  }
  if (auto s = SetDst(0, 0, t); !s.ok()) return s;
  if (a.kind == RawOperand::kSpecial &&
      (a.name == "%clock" || a.name == "%clock64" || a.name == "%globaltimer")) {
    in_.fn = SelectClock(a.name != "%clock");
    return absl::OkStatus();
  }
  if (a.kind == RawOperand::kSym && b_.params.contains(a.name)) {
    return Err("taking the address of parameter '%s' is not supported", a.name);
  }
  if (auto s = SetSrc(0, 1, t); !s.ok()) return s;
  OpSel sel;
  sel.op = Op::kMov;
  in_.fn = SelectIntOp(sel);
  return absl::OkStatus();
}

absl::Status Decoder::Cvt() {
  relaxed_ = true;
  if (auto s = ParseMods(kMType | kMRound | kMFtz | kMSat); !s.ok()) return s;
  if (auto s = NeedTypes(2); !s.ok()) return s;
  const Ty dt = m_.types[0], st = m_.types[1];
  OpSel sel;
  sel.op = Op::kCvt;
  sel.type = dt;
  sel.type2 = st;
  sel.ftz = m_.ftz;
  sel.sat = m_.sat;
  Round rnd = m_.rnd;
  const bool rnd_int = rnd >= Round::kRni;
  if (dt == Ty::kF16x2 || dt == Ty::kBF16x2) {
    if (auto s = NeedOps(3); !s.ok()) return s;
    if (auto s = SetDst(0, 0, dt); !s.ok()) return s;
    if (auto s = SetSrc(0, 1, st); !s.ok()) return s;
    if (auto s = SetSrc(1, 2, st); !s.ok()) return s;
  } else {
    if (auto s = NeedOps(2); !s.ok()) return s;
    if (auto s = SetDst(0, 0, dt); !s.ok()) return s;
    if (auto s = SetSrc(0, 1, st); !s.ok()) return s;
    const bool df = TyIsFloat(dt), sf = TyIsFloat(st);
    if (sf && !df) {
      if (!rnd_int) return Err("float-to-integer cvt needs .rni, .rzi, .rmi or .rpi");
    } else if (!sf && df) {
      if (rnd == Round::kNone || rnd_int) {
        return Err("integer-to-float cvt needs .rn, .rz, .rm or .rp");
      }
    } else if (!sf && !df) {
      if (rnd != Round::kNone) return Err("integer-to-integer cvt takes no rounding modifier");
    } else if (TySize(dt) < TySize(st) || (dt == Ty::kBF16 && st == Ty::kF16) ||
               (dt == Ty::kF16 && st == Ty::kBF16)) {
      if (rnd == Round::kNone || rnd_int) {
        return Err("narrowing float cvt needs .rn, .rz, .rm or .rp");
      }
    } else if (TySize(dt) == TySize(st)) {
      if (rnd != Round::kNone && !rnd_int) return Err("same-size float cvt takes .rni/.rzi/...");
    } else if (rnd != Round::kNone) {
      return Err("widening float cvt takes no rounding modifier");
    }
  }
  sel.rnd = rnd;
  in_.mode = static_cast<uint8_t>((m_.sat ? 1 : 0) | (m_.ftz ? 2 : 0));
  in_.mode2 = static_cast<uint8_t>(rnd);
  in_.fn = SelectCvt(sel);
  if (in_.fn == nullptr) return Err("unsupported conversion");
  return absl::OkStatus();
}

absl::Status Decoder::Cvta() {
  if (auto s = ParseMods(kMType | kMSpace | kMTo); !s.ok()) return s;
  if (auto s = NeedTypes(1); !s.ok()) return s;
  if (auto s = NeedOps(2); !s.ok()) return s;
  const Ty t = m_.types[0];
  if (t != Ty::kU32 && t != Ty::kU64) return Err("cvta takes .u32 or .u64");
  if (!m_.has_space) return Err("cvta needs a state space");
  if (auto s = SetDst(0, 0, t); !s.ok()) return s;
  OpSel mov;
  mov.op = Op::kMov;
  const RawOperand& a = r_.ops[1];
  if (m_.space == Space::kGlobal) {
    if (a.kind == RawOperand::kSym) return Err("global variables are not supported");
    if (auto s = SetSrc(0, 1, t); !s.ok()) return s;
    in_.fn = SelectIntOp(mov);  // global addresses are generic addresses
    return absl::OkStatus();
  }
  if (m_.space != Space::kShared && m_.space != Space::kLocal) {
    return Err("cvta supports .global, .shared and .local only");
  }
  const bool local = m_.space == Space::kLocal;
  if (!m_.to && a.kind == RawOperand::kSym) {
    auto off = local ? b_.LocalAddress(a.name) : b_.SharedAddress(a.name);
    if (!off.ok()) return Err("unknown .%s variable '%s'", local ? "local" : "shared", a.name);
    auto slot = b_.ConstSlot((local ? kLocalWindow : kSharedWindow) + *off);
    if (!slot.ok()) return slot.status();
    in_.s[0] = *slot;
    in_.fn = SelectIntOp(mov);
    return absl::OkStatus();
  }
  if (auto s = SetSrc(0, 1, t); !s.ok()) return s;
  in_.fn = SelectCvta(m_.to, local, t == Ty::kU32);
  return absl::OkStatus();
}

absl::Status Decoder::LdSt() {
  relaxed_ = true;
  if (auto s = ParseMods(kMType | kMSpace | kMVec | kMHint | kMSem | kMScope | kMNc); !s.ok()) {
    return s;
  }
  if (auto s = NeedTypes(1); !s.ok()) return s;
  if (auto s = NeedOps(2); !s.ok()) return s;
  const Ty t = m_.types[0];
  const int size = TySize(t);
  if (size == 0 || size > 8) return Err("unsupported access type");
  const Space sp = m_.space;
  if (sp == Space::kConst) return Err("the .const state space is not supported");
  const bool is_load = op_ != Op::kSt;
  if (!is_load && sp == Space::kParam) return Err("st.param is not supported (no calls)");
  if (m_.nc && (!is_load || sp != Space::kGlobal)) return Err(".nc applies to ld.global only");
  const RawOperand& val = r_.ops[is_load ? 0 : 1];
  const int vec = m_.vec;
  if (vec * size > 16) return Err("vector access wider than 16 bytes");
  if (vec > 1 && (val.kind != RawOperand::kVec || static_cast<int>(val.elems.size()) != vec)) {
    return Err("a .v%d access needs a vector of %d registers", vec, vec);
  }
  if (vec == 1 && val.kind == RawOperand::kVec) return Err("vector operand without .v2/.v4");
  for (int e = 0; e < vec; ++e) {
    const RawOperand& o = vec > 1 ? val.elems[e] : val;
    if (is_load) {
      auto s = Dst(o, t);
      if (!s.ok()) return s.status();
      in_.d[e] = *s;
    } else {
      if (o.kind == RawOperand::kSink) return Err("'_' cannot be stored");
      auto s = Src(o, t);
      if (!s.ok()) return s.status();
      in_.s[e] = *s;
    }
  }
  if (auto s = Address(r_.ops[is_load ? 1 : 0], sp); !s.ok()) return s;
  in_.space = sp;
  in_.size = static_cast<uint8_t>(size);
  in_.vec = static_cast<uint8_t>(vec);
  in_.type = t;
  in_.fn = is_load ? SelectLoad(sp, size, TyIsSigned(t), vec) : SelectStore(sp, size, vec);
  if (in_.fn == nullptr) return Err("unsupported access");
  return absl::OkStatus();
}

absl::Status Decoder::Atom() {
  if (auto s = ParseMods(kMType | kMSpace | kMAop | kMSem | kMScope); !s.ok()) return s;
  if (auto s = NeedTypes(1); !s.ok()) return s;
  if (m_.aop == AtomOp::kNone) return Err("missing operation (.add, .min, .cas, ...)");
  const Ty t = m_.types[0];
  const Space sp = m_.space;
  if (sp != Space::kGlobal && sp != Space::kShared && sp != Space::kGeneric) {
    return Err("atomics support .global, .shared and generic addresses");
  }
  const bool ret = op_ == Op::kAtom;
  const bool cas = m_.aop == AtomOp::kCas;
  if (!ret && cas) return Err("red has no .cas");
  if (auto s = NeedOps((ret ? 3 : 2) + (cas ? 1 : 0)); !s.ok()) return s;
  size_t i = 0;
  if (ret) {
    if (auto s = SetDst(0, i++, t); !s.ok()) return s;
  }
  if (auto s = Address(r_.ops[i++], sp); !s.ok()) return s;
  if (auto s = SetSrc(0, i++, t); !s.ok()) return s;
  in_.s[1] = in_.s[0];
  if (cas) {
    if (auto s = SetSrc(1, i++, t); !s.ok()) return s;
  }
  in_.space = sp;
  in_.size = static_cast<uint8_t>(TySize(t));
  in_.type = t;
  in_.fn = SelectAtom(sp, m_.aop, t, ret);
  if (in_.fn == nullptr) return Err("unsupported atomic operation/type");
  return absl::OkStatus();
}

absl::Status Decoder::Shfl() {
  if (auto s = ParseMods(kMType | kMShfl | kMSync); !s.ok()) return s;
  if (!m_.sync) return Err("shfl without .sync is not supported (use shfl.sync)");
  if (!m_.has_shfl) return Err("missing mode (.up, .down, .bfly, .idx)");
  if (OneType() != Ty::kB32) return Err("shfl.sync takes .b32");
  if (auto s = NeedOps(5); !s.ok()) return s;
  RawOperand d = r_.ops[0];
  if (d.has_reg2) {
    if (!d.reg2.pred) return Err("second destination must be a predicate register");
    in_.pd[0] = d.reg2.index;
    in_.has_pd2 = true;
    d.has_reg2 = false;
  }
  auto ds = Dst(d, Ty::kB32);
  if (!ds.ok()) return ds.status();
  in_.d[0] = *ds;
  for (int k = 0; k < 4; ++k) {
    if (auto s = SetSrc(k, k + 1, Ty::kB32); !s.ok()) return s;
  }
  in_.mode = static_cast<uint8_t>(m_.shfl);
  in_.mode2 = UniformFlag(r_.ops[4]);
  in_.fn = SelectShfl(m_.shfl);
  return absl::OkStatus();
}

absl::Status Decoder::Vote() {
  if (auto s = ParseMods(kMType | kMVote | kMSync); !s.ok()) return s;
  if (!m_.sync) return Err("vote without .sync is not supported (use vote.sync)");
  if (!m_.has_vote) return Err("missing mode (.all, .any, .uni, .ballot)");
  if (auto s = NeedOps(3); !s.ok()) return s;
  const bool ballot = m_.vote == VoteMode::kBallot;
  if (OneType() != (ballot ? Ty::kB32 : Ty::kPred)) {
    return Err("vote.sync.%s takes %s", ballot ? "ballot" : "all/any/uni",
               ballot ? ".b32" : ".pred");
  }
  if (ballot) {
    if (auto s = SetDst(0, 0, Ty::kB32); !s.ok()) return s;
  } else {
    if (auto s = PredDst(0, r_.ops[0]); !s.ok()) return s;
  }
  if (auto s = PredSrc(0, r_.ops[1]); !s.ok()) return s;
  if (auto s = SetSrc(0, 2, Ty::kB32); !s.ok()) return s;
  in_.mode2 = UniformFlag(r_.ops[2]);
  in_.fn = SelectVote(m_.vote);
  return absl::OkStatus();
}

absl::Status Decoder::Redux() {
  if (auto s = ParseMods(kMType | kMAop | kMSync); !s.ok()) return s;
  if (!m_.sync) return Err("redux needs .sync");
  if (auto s = NeedTypes(1); !s.ok()) return s;
  if (auto s = NeedOps(3); !s.ok()) return s;
  const Ty t = m_.types[0];
  if (auto s = SetDst(0, 0, t); !s.ok()) return s;
  if (auto s = SetSrc(0, 1, t); !s.ok()) return s;
  if (auto s = SetSrc(1, 2, Ty::kB32); !s.ok()) return s;
  in_.mode2 = UniformFlag(r_.ops[2]);
  in_.fn = SelectRedux(m_.aop, t);
  if (in_.fn == nullptr) return Err("unsupported redux operation/type");
  return absl::OkStatus();
}

absl::Status Decoder::Bar() {
  std::vector<std::string> mods;
  for (const auto& m : r_.mods) {
    if (m != "cta") mods.push_back(m);
  }
  const bool is_bar = op_ == Op::kBar;
  if (is_bar && mods.size() == 2 && mods[0] == "warp" && mods[1] == "sync") {
    if (auto s = NeedOps(1); !s.ok()) return s;
    if (auto s = SetSrc(0, 0, Ty::kB32); !s.ok()) return s;
    in_.mode2 = UniformFlag(r_.ops[0]);
    in_.fn = SelectWarpSync();
    return absl::OkStatus();
  }
  bool aligned = is_bar, arrive = false;
  int red = 0;  // bar.red: 1 popc, 2 and, 3 or
  if (mods.empty()) return Err("missing .sync, .arrive or .red");
  size_t next = 1;
  if (mods[0] == "sync") {
  } else if (mods[0] == "arrive") {
    arrive = true;
  } else if (mods[0] == "red") {
    const std::string op = mods.size() > 1 ? mods[1] : "";
    const std::string ty = mods.size() > 2 ? mods[2] : "";
    if (op == "popc" && ty == "u32") {
      red = 1;
    } else if ((op == "and" || op == "or") && ty == "pred") {
      red = op == "and" ? 2 : 3;
    } else {
      return Err("expected bar.red.popc.u32, bar.red.and.pred or bar.red.or.pred");
    }
    next = 3;
  } else {
    return Err("unknown modifier '.%s'", mods[0]);
  }
  for (size_t i = next; i < mods.size(); ++i) {
    if (!is_bar && mods[i] == "aligned") {
      aligned = true;
    } else {
      return Err("unknown modifier '.%s'", mods[i]);
    }
  }
  size_t first = 0;
  if (red != 0) {
    // bar.red d, a{, b}, {!}c
    if (auto s = NeedOps(3, 4); !s.ok()) return s;
    if (red == 1) {
      if (auto s = SetDst(0, 0, Ty::kU32); !s.ok()) return s;
    } else {
      if (auto s = PredDst(0, r_.ops[0]); !s.ok()) return s;
    }
    if (auto s = PredSrc(0, r_.ops.back()); !s.ok()) return s;
    first = 1;
  } else {
    if (auto s = NeedOps(arrive ? 2 : 1, 2); !s.ok()) return s;
  }
  const size_t nbar = r_.ops.size() - first - (red != 0 ? 1 : 0);
  if (auto s = SetSrc(0, first, Ty::kU32); !s.ok()) return s;
  const bool has_count = nbar == 2;
  if (has_count) {
    if (auto s = SetSrc(1, first + 1, Ty::kU32); !s.ok()) return s;
  }
  in_.mode = static_cast<uint8_t>((has_count ? 1 : 0) | (aligned ? 2 : 0) | (red != 0 ? 4 : 0));
  in_.mode2 = static_cast<uint8_t>(red);
  in_.ctl = arrive ? Ctl::kBarArrive : Ctl::kBar;
  return absl::OkStatus();
}

absl::Status Decoder::BitScan() {
  Ty t = Ty::kNone;
  if (op_ == Op::kBfind) {
    bool shiftamt = false;
    for (const std::string& m : r_.mods) {
      if (m == "shiftamt") {
        shiftamt = true;
      } else if (!ParseTy(m, &t)) {
        return Err("unknown modifier '.%s'", m);
      }
    }
    if (auto s = NeedOps(2); !s.ok()) return s;
    if (auto s = SetDst(0, 0, Ty::kU32); !s.ok()) return s;
    if (auto s = SetSrc(0, 1, t); !s.ok()) return s;
    in_.fn = SelectBfind(t, shiftamt);
    if (in_.fn == nullptr) return Err("bfind takes .u32, .s32, .u64 or .s64");
    return absl::OkStatus();
  }
  int dir = 0, mode = 0;  // 1 = l / wrap, 2 = r / clamp
  for (const std::string& m : r_.mods) {
    if (m == "l" || m == "r") {
      dir = m == "l" ? 1 : 2;
    } else if (m == "wrap" || m == "clamp") {
      mode = m == "wrap" ? 1 : 2;
    } else if (!ParseTy(m, &t)) {
      return Err("unknown modifier '.%s'", m);
    }
  }
  if (dir == 0 || mode == 0 || t != Ty::kB32) return Err("expected shf.{l,r}.{wrap,clamp}.b32");
  if (auto s = NeedOps(4); !s.ok()) return s;
  if (auto s = SetDst(0, 0, t); !s.ok()) return s;
  for (int k = 0; k < 3; ++k) {
    if (auto s = SetSrc(k, k + 1, t); !s.ok()) return s;
  }
  in_.fn = SelectShf(dir == 1, mode == 2);
  return absl::OkStatus();
}

absl::Status Decoder::Cp() {
  const auto& mods = r_.mods;
  if (mods.empty() || mods[0] != "async") return Err("only cp.async is supported");
  if (mods.size() >= 2 &&
      (mods[1] == "commit_group" || mods[1] == "wait_group" || mods[1] == "wait_all")) {
    // Copies complete when issued, so groups are always complete.
    if (mods.size() != 2) return Err("unexpected modifier");
    if (auto s = NeedOps(mods[1] == "wait_group" ? 1 : 0); !s.ok()) return s;
    in_.fn = SelectNop();
    return absl::OkStatus();
  }
  bool cg = false, shared = false, global = false;
  for (size_t i = 1; i < mods.size(); ++i) {
    const std::string& m = mods[i];
    if (m == "ca" || m == "cg") {
      cg = m == "cg";
    } else if (m == "shared" || m == "shared::cta") {
      shared = true;
    } else if (m == "global") {
      global = true;
    } else if (m.rfind("L2::", 0) == 0 && m != "L2::cache_hint") {
    } else {
      return Err("unsupported modifier '.%s'", m);
    }
  }
  if (!shared || !global) return Err("cp.async needs .shared.global");
  if (auto s = NeedOps(3, 4); !s.ok()) return s;
  if (auto s = Address(r_.ops[0], Space::kShared); !s.ok()) return s;
  const RawOperand& src = r_.ops[1];
  if (src.kind != RawOperand::kAddr || !src.addr_reg || TySize(src.reg.type) != 8) {
    return Err("cp.async source must be [64-bit register + offset]");
  }
  in_.s[0] = src.reg.index;
  in_.imm2 = src.offset;
  Check(src.reg.index, true);
  const RawOperand& n = r_.ops[2];
  if (n.kind != RawOperand::kInt || (n.ival != 4 && n.ival != 8 && n.ival != 16)) {
    return Err("cp-size must be 4, 8 or 16");
  }
  if (cg && n.ival != 16) return Err("cp.async.cg copies 16 bytes");
  in_.size = static_cast<uint8_t>(n.ival);
  if (r_.ops.size() == 4) {
    if (auto s = SetSrc(1, 3, Ty::kU32); !s.ok()) return s;
    in_.mode = 1;
  }
  in_.fn = SelectCpAsync();
  return absl::OkStatus();
}

absl::Status Decoder::Misc() {
  switch (op_) {
    case Op::kActivemask:
      if (auto s = ParseMods(kMType); !s.ok()) return s;
      if (OneType() != Ty::kB32) return Err("activemask takes .b32");
      if (auto s = NeedOps(1); !s.ok()) return s;
      if (auto s = SetDst(0, 0, Ty::kB32); !s.ok()) return s;
      in_.fn = SelectActiveMask();
      return absl::OkStatus();
    case Op::kMembar:
    case Op::kFence:
      // Warps of a block run one after another and blocks share host memory, so every
      // ordering the program asks for already holds.
      for (const auto& m : r_.mods) {
        static const char* kOk[] = {
            "cta",   "gl",    "sys",   "gpu",         "cluster",         "sc",    "acq_rel",
            "proxy", "async", "alias", "shared::cta", "shared::cluster", "global"};
        bool ok = false;
        for (const char* k : kOk) ok = ok || m == k;
        if (!ok) return Err("unknown modifier '.%s'", m);
      }
      if (auto s = NeedOps(0); !s.ok()) return s;
      in_.fn = SelectNop();
      return absl::OkStatus();
    case Op::kPrefetch:
    case Op::kPrefetchu:
    case Op::kNanosleep:
      in_.fn = SelectNop();
      return absl::OkStatus();
    case Op::kGriddepcontrol:
      // Launches run one after another, so dependent-launch control has nothing to do.
      if (r_.mods.size() != 1 || (r_.mods[0] != "launch_dependents" && r_.mods[0] != "wait")) {
        return Err("expected griddepcontrol.launch_dependents or griddepcontrol.wait");
      }
      in_.fn = SelectNop();
      return absl::OkStatus();
    case Op::kBra: {
      if (auto s = ParseMods(kMUni); !s.ok()) return s;
      if (auto s = NeedOps(1); !s.ok()) return s;
      const RawOperand& l = r_.ops[0];
      if (l.kind != RawOperand::kSym) return Err("branch target must be a label");
      auto it = b_.labels.find(l.name);
      if (it == b_.labels.end()) return Err("unknown label '%s'", l.name);
      in_.target = it->second;
      in_.ctl = Ctl::kBra;
      return absl::OkStatus();
    }
    case Op::kRet:
    case Op::kExit:
      if (auto s = ParseMods(kMUni); !s.ok()) return s;
      if (auto s = NeedOps(0); !s.ok()) return s;
      in_.ctl = Ctl::kExit;
      return absl::OkStatus();
    default:
      return Err("unsupported instruction");
  }
}

}  // namespace ptxserve::emu
