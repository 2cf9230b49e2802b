// Decoder framework: modifier parsing with per-opcode allow-lists, operand resolution
// (immediates and special registers become pre-filled slots), and DecodeFunction, which
// lays out shared and local memory and decodes every instruction.
#include "kernels/emu/decoder.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ptxserve::emu {

std::string Decoder::Spelled() const {
  std::string s = r_.opcode;
  for (const auto& m : r_.mods) absl::StrAppend(&s, ".", m);
  return s;
}

absl::Status Decoder::NeedOps(size_t n) const { return NeedOps(n, n); }
absl::Status Decoder::NeedOps(size_t lo, size_t hi) const {
  if (r_.ops.size() < lo || r_.ops.size() > hi) {
    if (lo == hi) return Err("expected %d operands, got %d", lo, r_.ops.size());
    return Err("expected %d to %d operands, got %d", lo, hi, r_.ops.size());
  }
  return absl::OkStatus();
}
absl::Status Decoder::NeedTypes(size_t n) const {
  if (m_.types.size() != n) {
    return Err("expected %d type modifier%s, got %d", n, n == 1 ? "" : "s", m_.types.size());
  }
  return absl::OkStatus();
}

absl::Status Decoder::NeedTarget(int min_sm, int min_ptx) const {
  const Module& mod = *b_.module;
  int sm = 0;
  if (mod.target.rfind("sm_", 0) == 0) {
    for (size_t i = 3; i < mod.target.size() && absl::ascii_isdigit(mod.target[i]); ++i) {
      sm = sm * 10 + (mod.target[i] - '0');
    }
  }
  if (sm < min_sm)
    return Err("needs .target sm_%d or newer, the module has %s", min_sm, mod.target);
  if (mod.version_major * 10 + mod.version_minor < min_ptx) {
    return Err("needs PTX ISA %d.%d or newer, the module has .version %d.%d", min_ptx / 10,
               min_ptx % 10, mod.version_major, mod.version_minor);
  }
  return absl::OkStatus();
}

absl::Status Decoder::ParseMods(uint32_t allowed) {
  static const std::pair<const char*, Cmp> kCmps[] = {
      {"eq", Cmp::kEq},   {"ne", Cmp::kNe},   {"lt", Cmp::kLt},   {"le", Cmp::kLe},
      {"gt", Cmp::kGt},   {"ge", Cmp::kGe},   {"lo", Cmp::kLo},   {"ls", Cmp::kLs},
      {"hi", Cmp::kHi},   {"hs", Cmp::kHs},   {"equ", Cmp::kEqu}, {"neu", Cmp::kNeu},
      {"ltu", Cmp::kLtu}, {"leu", Cmp::kLeu}, {"gtu", Cmp::kGtu}, {"geu", Cmp::kGeu},
      {"num", Cmp::kNum}, {"nan", Cmp::kNan}};
  static const std::pair<const char*, Round> kRounds[] = {
      {"rn", Round::kRn},   {"rz", Round::kRz},   {"rm", Round::kRm},   {"rp", Round::kRp},
      {"rni", Round::kRni}, {"rzi", Round::kRzi}, {"rmi", Round::kRmi}, {"rpi", Round::kRpi}};
  static const std::pair<const char*, AtomOp> kAops[] = {
      {"add", AtomOp::kAdd}, {"min", AtomOp::kMin}, {"max", AtomOp::kMax}, {"exch", AtomOp::kExch},
      {"cas", AtomOp::kCas}, {"inc", AtomOp::kInc}, {"dec", AtomOp::kDec}, {"and", AtomOp::kAnd},
      {"or", AtomOp::kOr},   {"xor", AtomOp::kXor}};
  const bool is_setp = op_ == Op::kSetp;
  for (const std::string& w : r_.mods) {
    uint32_t cat = 0;
    Ty t;
    if (ParseTy(w, &t)) {
      cat = kMType;
      m_.types.push_back(t);
    } else if (is_setp && (w == "and" || w == "or" || w == "xor")) {
      cat = kMBool;
      m_.bop = w == "and" ? BoolOp::kAnd : w == "or" ? BoolOp::kOr : BoolOp::kXor;
    } else if (w == "lo" && !is_setp) {
      cat = kMWidth;
      m_.width = Width::kLo;
    } else if (w == "hi" && !is_setp) {
      cat = kMWidth;
      m_.width = Width::kHi;
    } else if (w == "wide") {
      cat = kMWidth;
      m_.width = Width::kWide;
    } else if (w == "ftz") {
      cat = kMFtz;
      m_.ftz = true;
    } else if (w == "sat") {
      cat = kMSat;
      m_.sat = true;
    } else if (w == "approx" || w == "full") {
      cat = kMApprox;
      (w == "approx" ? m_.approx : m_.full) = true;
    } else if (w == "to") {
      cat = kMTo;
      m_.to = true;
    } else if (w == "nc") {
      cat = kMNc;
      m_.nc = true;
    } else if (w == "sync" || w == "aligned") {
      cat = kMSync;
      (w == "sync" ? m_.sync : m_.aligned) = true;
    } else if (w == "uni" && op_ != Op::kVote) {
      cat = kMUni;
      m_.uni = true;
    } else if (w == "v2" || w == "v4") {
      cat = kMVec;
      m_.vec = w == "v2" ? 2 : 4;
    } else if (w == "global" || w == "shared" || w == "shared::cta" || w == "param" ||
               w == "local" || w == "const") {
      cat = kMSpace;
      m_.has_space = true;
      m_.space = w == "global"  ? Space::kGlobal
                 : w == "param" ? Space::kParam
                 : w == "local" ? Space::kLocal
                 : w == "const" ? Space::kConst
                                : Space::kShared;
    } else if (w == "ca" || w == "cg" || w == "cs" || w == "lu" || w == "cv" || w == "wb" ||
               w == "wt" || w.rfind("L1::", 0) == 0 ||
               (w.rfind("L2::", 0) == 0 && w != "L2::cache_hint")) {
      cat = kMHint;
    } else if (w == "volatile" || w == "relaxed" || w == "acquire" || w == "release" ||
               w == "weak" || w == "acq_rel" || w == "sc" || w == "mmio") {
      cat = kMSem;
    } else if (w == "cta" || w == "gpu" || w == "sys" || w == "cluster") {
      cat = kMScope;
    } else if (w == "up" || w == "down" || w == "bfly" || w == "idx") {
      cat = kMShfl;
      m_.has_shfl = true;
      m_.shfl = w == "up"     ? ShflMode::kUp
                : w == "down" ? ShflMode::kDown
                : w == "bfly" ? ShflMode::kBfly
                              : ShflMode::kIdx;
    } else if (op_ == Op::kVote && (w == "all" || w == "any" || w == "uni" || w == "ballot")) {
      cat = kMVote;
      m_.has_vote = true;
      m_.vote = w == "all"   ? VoteMode::kAll
                : w == "any" ? VoteMode::kAny
                : w == "uni" ? VoteMode::kUni
                             : VoteMode::kBallot;
    } else {
      for (const auto& [n, c] : kCmps) {
        if (w == n) {
          cat = kMCmp;
          m_.has_cmp = true;
          m_.cmp = c;
        }
      }
      for (const auto& [n, r] : kRounds) {
        if (w == n) {
          cat = kMRound;
          m_.rnd = r;
        }
      }
      if (!is_setp) {
        for (const auto& [n, a] : kAops) {
          if (w == n) {
            cat = kMAop;
            m_.aop = a;
          }
        }
      }
    }
    if (cat == 0) return Err("unknown modifier '.%s'", w);
    if ((cat & allowed) == 0) return Err("modifier '.%s' is not supported for '%s'", w, r_.opcode);
    if ((m_.seen & cat) != 0 && cat != kMType && cat != kMHint && cat != kMSem && cat != kMSync &&
        cat != kMApprox) {
      return Err("conflicting modifier '.%s'", w);
    }
    m_.seen |= cat;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Decoder::ImmBits(const RawOperand& o, Ty ty) const {
  const int size = TySize(ty);
  const uint64_t mask = size >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * size)) - 1;
  if (o.kind == RawOperand::kInt) {
    const int64_t v = static_cast<int64_t>(o.ival);
    if (ty == Ty::kF32 || ty == Ty::kF64) {
      return Err("integer literal %d where a %s value is expected (write 0f/0d or 1.0)", v,
                 TyName(ty));
    }
    if (TyIsSigned(ty) && size < 8) {
      const int sh = 64 - 8 * size;
      return static_cast<uint64_t>((static_cast<int64_t>(o.ival << sh)) >> sh);
    }
    return o.ival & mask;  // bit patterns for b/u and the 16-bit float types
  }
  if (o.kind != RawOperand::kFloat) return Err("expected an immediate");
  const double v = o.f32_bits ? BitsToF32(static_cast<uint32_t>(o.fbits)) : BitsToF64(o.fbits);
  switch (ty) {
    case Ty::kF32:
      return o.f32_bits ? o.fbits : F32ToBits(static_cast<float>(v));
    case Ty::kF64:
      return o.f32_bits ? F64ToBits(v) : o.fbits;
    case Ty::kF16:
      return F32ToHalf(static_cast<float>(v));
    case Ty::kBF16:
      return F32ToBF16(static_cast<float>(v));
    default:
      break;
  }
  if (TyIsBits(ty) && o.f32_bits && size == 4) return o.fbits;  // mov.b32 %r1, 0f3F800000
  if (TyIsBits(ty) && !o.f32_bits && size == 8) return o.fbits;
  return Err("floating-point literal used where a %s value is expected", TyName(ty));
}

// PTX operand type rules: bit types match any type of their size, signed and unsigned
// integers of one size match each other, a float type matches only itself; ld/st/cvt
// ("relaxed") may also use a wider integer or bit register.
bool Decoder::RegFits(Ty reg, Ty inst) const {
  const int rs = TySize(reg), is = TySize(inst);
  const bool rf = TyIsFloat(reg), inf = TyIsFloat(inst);
  if (rs == is) {
    if (TyIsBits(reg) || TyIsBits(inst)) return true;
    if (!rf && !inf) return true;
    return reg == inst;
  }
  return relaxed_ && rs > is && !rf && (!inf || TyIsBits(reg));
}

void Decoder::Check(uint16_t slot, bool is_reg) {
  if (!is_reg) return;
  for (int i = 0; i < in_.nchk; ++i) {
    if (in_.chk[i] == slot) return;
  }
  in_.chk[in_.nchk++] = slot;
}

absl::StatusOr<uint16_t> Decoder::Src(const RawOperand& o, Ty ty) {
  switch (o.kind) {
    case RawOperand::kReg: {
      if (o.reg.pred)
        return Err("predicate register used where a %s value is expected", TyName(ty));
      if (o.neg || o.has_reg2) return Err("'!' and '|' are not allowed on a data operand");
      if (!RegFits(o.reg.type, ty)) {
        return Err("register %s (.%s) cannot be a .%s operand", b_.fn->slot_names[o.reg.index],
                   TyName(o.reg.type), TyName(ty));
      }
      Check(o.reg.index, true);
      return o.reg.index;
    }
    case RawOperand::kInt:
    case RawOperand::kFloat: {
      auto bits = ImmBits(o, ty);
      if (!bits.ok()) return bits.status();
      return b_.ConstSlot(*bits);
    }
    case RawOperand::kSpecial: {
      static const std::pair<const char*, Special> kSpecials[] = {
          {"%tid.x", Special::kTidX},
          {"%tid.y", Special::kTidY},
          {"%tid.z", Special::kTidZ},
          {"%ntid.x", Special::kNtidX},
          {"%ntid.y", Special::kNtidY},
          {"%ntid.z", Special::kNtidZ},
          {"%ctaid.x", Special::kCtaidX},
          {"%ctaid.y", Special::kCtaidY},
          {"%ctaid.z", Special::kCtaidZ},
          {"%nctaid.x", Special::kNctaidX},
          {"%nctaid.y", Special::kNctaidY},
          {"%nctaid.z", Special::kNctaidZ},
          {"%laneid", Special::kLaneId},
          {"%warpid", Special::kWarpId},
          {"%nwarpid", Special::kNWarpId},
          {"%smid", Special::kSmId},
          {"%nsmid", Special::kNSmId},
          {"%gridid", Special::kGridId},
          {"%lanemask_eq", Special::kLanemaskEq},
          {"%lanemask_le", Special::kLanemaskLe},
          {"%lanemask_lt", Special::kLanemaskLt},
          {"%lanemask_ge", Special::kLanemaskGe},
          {"%lanemask_gt", Special::kLanemaskGt},
          {"%dynamic_smem_size", Special::kDynamicSmemSize},
          {"%total_smem_size", Special::kTotalSmemSize},
      };
      for (const auto& [n, s] : kSpecials) {
        if (o.name == n) return b_.SpecialSlot(s);
      }
      return Err("special register %s can only be read by mov", o.name);
    }
    case RawOperand::kSym: {
      auto off = b_.SharedAddress(o.name);
      if (off.ok()) return b_.ConstSlot(*off);
      auto loc = b_.LocalAddress(o.name);
      if (loc.ok()) return b_.ConstSlot(*loc);
      return Err("unknown symbol '%s' (not a register, .shared/.local variable or immediate)",
                 o.name);
    }
    default:
      return Err("expected a register or an immediate");
  }
}

absl::StatusOr<uint16_t> Decoder::Dst(const RawOperand& o, Ty ty) {
  if (o.kind == RawOperand::kSink) return b_.SinkSlot();
  if (o.kind != RawOperand::kReg || o.reg.pred || o.neg || o.has_reg2) {
    return Err("destination must be a %s register", TyName(ty));
  }
  if (!RegFits(o.reg.type, ty)) {
    return Err("register %s (.%s) cannot hold a .%s result", b_.fn->slot_names[o.reg.index],
               TyName(o.reg.type), TyName(ty));
  }
  return o.reg.index;
}

absl::Status Decoder::SetSrc(int k, size_t i, Ty ty) {
  auto s = Src(r_.ops[i], ty);
  if (!s.ok()) return s.status();
  in_.s[k] = *s;
  return absl::OkStatus();
}
absl::Status Decoder::SetDst(int k, size_t i, Ty ty) {
  auto s = Dst(r_.ops[i], ty);
  if (!s.ok()) return s.status();
  in_.d[k] = *s;
  return absl::OkStatus();
}

absl::Status Decoder::PredSrc(int k, const RawOperand& o) {
  if (o.kind != RawOperand::kReg || !o.reg.pred || o.has_reg2) {
    return Err("expected a predicate register operand");
  }
  in_.ps[k] = o.reg.index;
  in_.ps_neg[k] = o.neg;
  for (int i = 0; i < in_.npchk; ++i) {
    if (in_.pchk[i] == o.reg.index) return absl::OkStatus();
  }
  in_.pchk[in_.npchk++] = o.reg.index;
  return absl::OkStatus();
}

absl::Status Decoder::PredDst(int k, const RawOperand& o) {
  if (o.kind != RawOperand::kReg || !o.reg.pred || o.neg) {
    return Err("destination must be a predicate register");
  }
  in_.pd[k] = o.reg.index;
  return absl::OkStatus();
}

absl::Status Decoder::Address(const RawOperand& o, Space sp) {
  if (o.kind != RawOperand::kAddr) return Err("expected an address operand [...]");
  in_.imm = o.offset;
  if (o.addr_reg) {
    if (sp == Space::kParam) {
      return Err("parameter loads through a register address are not supported");
    }
    const int size = TySize(o.reg.type);
    if (size != 4 && size != 8) {
      return Err("address register %s must be 32 or 64 bits", b_.fn->slot_names[o.reg.index]);
    }
    in_.addr_is_reg = true;
    in_.addr_slot = o.reg.index;
    in_.addr32 = size == 4;
    Check(o.reg.index, true);
    return absl::OkStatus();
  }
  if (o.name.empty()) return absl::OkStatus();  // absolute address
  if (sp == Space::kParam) {
    auto it = b_.params.find(o.name);
    if (it == b_.params.end()) return Err("unknown parameter '%s'", o.name);
    in_.imm += b_.fn->params[it->second].offset;
    return absl::OkStatus();
  }
  if (sp == Space::kShared) {
    auto off = b_.SharedAddress(o.name);
    if (!off.ok()) return Err("unknown .shared variable '%s'", o.name);
    in_.imm += *off;
    return absl::OkStatus();
  }
  if (sp == Space::kLocal) {
    auto off = b_.LocalAddress(o.name);
    if (!off.ok()) return Err("unknown .local variable '%s'", o.name);
    in_.imm += *off;
    return absl::OkStatus();
  }
  if (sp == Space::kGeneric && b_.params.contains(o.name)) {
    return Err("'%s' is a parameter: use ld.param", o.name);
  }
  return Err("symbol '%s' cannot be addressed in this state space", o.name);
}

absl::Status Decoder::Run() {
  in_.op = static_cast<uint16_t>(op_);
  in_.line = r_.line;
  if (r_.has_guard) {
    in_.guard = r_.guard.index;
    in_.guard_neg = r_.guard_neg;
  }
  switch (op_) {
    case Op::kSetp:
      return Setp();
    case Op::kMov:
      return Mov();
    case Op::kCvt:
      return Cvt();
    case Op::kCvta:
      return Cvta();
    case Op::kLd:
    case Op::kLdu:
    case Op::kSt:
      return LdSt();
    case Op::kAtom:
    case Op::kRed:
      return Atom();
    case Op::kShfl:
      return Shfl();
    case Op::kVote:
      return Vote();
    case Op::kRedux:
      return Redux();
    case Op::kBar:
    case Op::kBarrier:
      return Bar();
    case Op::kBfind:
    case Op::kShf:
      return BitScan();
    case Op::kCp:
      return Cp();
    case Op::kLdmatrix:
      return Ldmatrix();
    case Op::kMma:
      return Mma();
    case Op::kActivemask:
    case Op::kMembar:
    case Op::kFence:
    case Op::kBra:
    case Op::kRet:
    case Op::kExit:
    case Op::kPrefetch:
    case Op::kPrefetchu:
    case Op::kNanosleep:
    case Op::kGriddepcontrol:
      return Misc();
    case Op::kTestp:
      return Err("testp is not supported");
    default:
      return Alu();
  }
}

absl::Status DecodeFunction(FnBuilder& b) {
  Function& fn = *b.fn;
  // Static shared variables first (function-local ones, then module-scope ones that the
  // function names), so the dynamic (.extern) array can start after all of them.
  std::vector<std::string> extern_names;
  uint32_t extern_align = 16;
  auto visit = [&](const std::string& name) -> absl::Status {
    const SharedVar* v = nullptr;
    if (auto l = b.local_shared.find(name); l != b.local_shared.end()) {
      v = &l->second;
    } else if (auto m = b.module_shared->find(name); m != b.module_shared->end()) {
      v = &m->second;
    }
    if (v == nullptr) return absl::OkStatus();
    if (v->is_extern) {
      extern_align = std::max(extern_align, v->align);
      return absl::OkStatus();
    }
    return b.SharedAddress(name).status();
  };
  for (const RawInstr& r : b.raw) {
    for (const RawOperand& o : r.ops) {
      if ((o.kind == RawOperand::kSym || (o.kind == RawOperand::kAddr && !o.addr_reg)) &&
          !o.name.empty()) {
        if (auto s = visit(o.name); !s.ok()) return s;
      }
    }
  }
  fn.dynamic_offset = (fn.static_shared + extern_align - 1) / extern_align * extern_align;

  fn.code.resize(b.raw.size());
  for (size_t i = 0; i < b.raw.size(); ++i) {
    const RawInstr& r = b.raw[i];
    Op op;
    if (!ParseOpName(r.opcode, &op)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "PTX line %d: unknown or unsupported instruction '%s'", r.line, r.opcode));
    }
    Decoder d(b, r, fn.code[i], op);
    if (auto s = d.Run(); !s.ok()) return s;
  }
  // Falling off the end of a kernel behaves like exit.
  Instr end;
  end.ctl = Ctl::kExit;
  end.op = static_cast<uint16_t>(Op::kExit);
  end.line = fn.code.empty() ? fn.line : fn.code.back().line;
  fn.code.push_back(end);
  return absl::OkStatus();
}

}  // namespace ptxserve::emu
