// Decode rules for ALU instructions: arithmetic/logic (one handler per type and modifier
// combination), setp, mov (incl. packing and symbol addresses), cvt, cvta, bfind and shf.
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
  in_.type = t;
  in_.approx = m_.approx;
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
  in_.type = t;
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

}  // namespace ptxserve::emu
