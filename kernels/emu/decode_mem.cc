// Decode rules for memory instructions: ld/ldu/st (state spaces, vectors, cache hints),
// atom/red and cp.async.
#include <algorithm>

#include "kernels/emu/decoder.h"

namespace ptxserve::emu {

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
  for (const std::string& m : r_.mods) {
    // Strong accesses (mode 1): they do not race with other strong accesses.
    if (m == "volatile" || m == "relaxed" || m == "acquire" || m == "release") in_.mode = 1;
  }
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

absl::Status Decoder::Cp() {
  const auto& mods = r_.mods;
  if (mods.empty() || mods[0] != "async") return Err("only cp.async is supported");
  if (auto s = NeedTarget(80, 70); !s.ok()) return s;
  b_.fn->uses_cp_async = true;
  if (mods.size() == 2 && mods[1] == "commit_group") {
    if (auto s = NeedOps(0); !s.ok()) return s;
    in_.fn = SelectCpAsyncCommit();
    return absl::OkStatus();
  }
  if (mods.size() == 2 && (mods[1] == "wait_group" || mods[1] == "wait_all")) {
    const bool all = mods[1] == "wait_all";
    if (auto s = NeedOps(all ? 0 : 1); !s.ok()) return s;
    if (!all) {
      const RawOperand& n = r_.ops[0];
      if (n.kind != RawOperand::kInt || static_cast<int64_t>(n.ival) < 0) {
        return Err("cp.async.wait_group takes a non-negative integer constant");
      }
      in_.imm = static_cast<int64_t>(n.ival);
    }
    in_.fn = SelectCpAsyncWait(all);
    return absl::OkStatus();
  }
  bool cg = false, shared = false, global = false;
  int min_ptx = 70;
  for (size_t i = 1; i < mods.size(); ++i) {
    const std::string& m = mods[i];
    if (m == "ca" || m == "cg") {
      cg = m == "cg";
    } else if (m == "shared" || m == "shared::cta") {
      shared = true;
      if (m == "shared::cta") min_ptx = std::max(min_ptx, 78);
    } else if (m == "global") {
      global = true;
    } else if (m.rfind("L2::", 0) == 0 && m != "L2::cache_hint") {
      min_ptx = std::max(min_ptx, 74);  // prefetch-size hints
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
    const RawOperand& last = r_.ops[3];
    if (last.kind == RawOperand::kReg && last.reg.pred) {  // ignore-src
      min_ptx = std::max(min_ptx, 75);
      if (auto s = PredSrc(0, last); !s.ok()) return s;
      in_.mode = 2;
    } else {  // src-size
      if (auto s = SetSrc(1, 3, Ty::kU32); !s.ok()) return s;
      in_.mode = 1;
    }
  }
  if (auto s = NeedTarget(80, min_ptx); !s.ok()) return s;
  in_.fn = SelectCpAsync();
  return absl::OkStatus();
}

}  // namespace ptxserve::emu
