// Declarations, checking, control flow and module assembly. The instruction
// emitters are in builder_ops.cc.
#include "kernels/ptx/builder.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ptxserve::ptx {
namespace {

constexpr absl::string_view kRegDecl[kNumRegClasses] = {".pred", ".b16", ".b32",
                                                        ".f32",  ".b64", ".f64"};
constexpr absl::string_view kDynSharedName = "s_dynamic";

}  // namespace

KernelBuilder::KernelBuilder(std::string name, Target target)
    : name_(std::move(name)), target_(target) {
  status_ = target_.Validate();
  if (ok()) ValidIdent(name_, "kernel name");
}

void KernelBuilder::Fail(absl::string_view message) {
  if (status_.ok()) {
    status_ = absl::InvalidArgumentError(absl::StrCat("kernel ", name_, ": ", message));
  }
}

bool KernelBuilder::ValidIdent(absl::string_view name, absl::string_view what) {
  bool good = !name.empty() && (absl::ascii_isalpha(name[0]) || name[0] == '_');
  for (char c : name) good = good && (absl::ascii_isalnum(c) || c == '_');
  if (!good) Fail(absl::StrCat(what, " '", name, "' is not a PTX identifier"));
  return good;
}

bool KernelBuilder::Require(int min_sm, int min_ptx, absl::string_view what) {
  if (target_.sm < min_sm) {
    Fail(absl::StrCat(what, " needs sm_", min_sm, ", target is ", target_.SmName()));
    return false;
  }
  if (target_.ptx_version < min_ptx) {
    Fail(absl::StrCat(what, " needs PTX ISA ", min_ptx / 10, ".", min_ptx % 10, ", target is ",
                      target_.VersionText()));
    return false;
  }
  return true;
}

// Mirrors ptxas' operand type rules (registers of the same size; .f32/.f64-declared
// registers only with float or bit instructions) and adds one of ours: a float
// register never feeds an integer instruction and vice versa, except through .bN.
static bool Fits(Type have, Type want) {
  if ((have == Type::kPred) != (want == Type::kPred)) return false;
  if (TypeBits(have) != TypeBits(want)) return false;
  const RegClass cls = ClassOf(have);
  if (cls == RegClass::kF32 && want != Type::kF32 && want != Type::kB32) return false;
  if (cls == RegClass::kF64 && want != Type::kF64 && want != Type::kB64) return false;
  const TypeKind hk = KindOf(have);
  const TypeKind wk = KindOf(want);
  if (hk == TypeKind::kBits || wk == TypeKind::kBits) return true;
  if (wk == TypeKind::kFloat) return have == want;
  if (wk == TypeKind::kUnsigned || wk == TypeKind::kSigned) {
    return hk == TypeKind::kUnsigned || hk == TypeKind::kSigned;
  }
  return true;
}

bool KernelBuilder::CheckOperand(const Operand& o, Type want, bool allow_imm,
                                 absl::string_view what) {
  if (!ok()) return false;
  switch (o.kind()) {
    case Operand::Kind::kReg:
      if (Fits(o.reg().type, want)) return true;
      Fail(absl::StrCat(what, ": register ", o.reg().Name(), " of type .", TypeName(o.reg().type),
                        " does not fit .", TypeName(want)));
      return false;
    case Operand::Kind::kImmInt:
      if (allow_imm && want != Type::kPred &&
          (KindOf(want) == TypeKind::kBits || KindOf(want) == TypeKind::kUnsigned ||
           KindOf(want) == TypeKind::kSigned)) {
        return true;
      }
      break;
    case Operand::Kind::kImmF32:
      if (allow_imm && want == Type::kF32) return true;
      break;
    case Operand::Kind::kImmF64:
      if (allow_imm && want == Type::kF64) return true;
      break;
    default:
      break;
  }
  Fail(absl::StrCat(what, ": operand ", o.Text(), " is not usable as .", TypeName(want)));
  return false;
}

bool KernelBuilder::CheckDst(Reg dst, Type want, absl::string_view what) {
  return CheckOperand(Operand(dst), want, /*allow_imm=*/false, what);
}

void KernelBuilder::Line(absl::string_view opcode, const std::vector<std::string>& operands) {
  if (!ok()) return;
  absl::StrAppend(&body_, "\t", guard_, opcode);
  if (!operands.empty()) absl::StrAppend(&body_, " \t", absl::StrJoin(operands, ", "));
  body_ += ";\n";
  last_was_ret_ = false;
}

Reg KernelBuilder::Param(absl::string_view name, Type t) {
  const std::string full = absl::StrCat("p_", name);
  if (!ValidIdent(full, "parameter")) return NewReg(t);
  for (const Param_& p : params_) {
    if (p.name == full) Fail(absl::StrCat("parameter '", name, "' declared twice"));
  }
  if (t == Type::kPred || IsHalfFloat(t)) {
    Fail(absl::StrCat("parameter '", name, "' has unsupported type .", TypeName(t)));
  }
  params_.push_back({full, t});
  return Ld1(Space::kParam, t, Operand::Addr(Symbol{full}));
}

Reg KernelBuilder::GlobalPtrParam(absl::string_view name) {
  const Reg raw = Param(name, Type::kU64);
  const Reg global = NewReg(Type::kU64);
  Line("cvta.to.global.u64", {global.Name(), raw.Name()});
  return global;
}

Symbol KernelBuilder::Shared(absl::string_view name, int64_t bytes, int align) {
  const std::string full = absl::StrCat("s_", name);
  ValidIdent(full, "shared array");
  for (const Shared_& s : shared_) {
    if (s.name == full) Fail(absl::StrCat("shared array '", name, "' declared twice"));
  }
  if (bytes <= 0 || align <= 0 || (align & (align - 1)) != 0) {
    Fail(absl::StrCat("shared array '", name, "': bad size ", bytes, " / alignment ", align));
  }
  shared_.push_back({full, bytes, align});
  return Symbol{full};
}

Symbol KernelBuilder::DynamicShared(int align) {
  if (align <= 0 || (align & (align - 1)) != 0) Fail("dynamic shared: bad alignment");
  dynamic_shared_align_ = std::max(dynamic_shared_align_, align);
  return Symbol{std::string(kDynSharedName)};
}

void KernelBuilder::SetMaxThreads(int x, int y, int z) {
  if (x <= 0 || y <= 0 || z <= 0 || x * y * z > 1024) {
    Fail(absl::StrCat("maxntid ", x, "x", y, "x", z, " is not a valid block size"));
  }
  maxntid_[0] = x;
  maxntid_[1] = y;
  maxntid_[2] = z;
}

Reg KernelBuilder::NewReg(Type t) {
  const int cls = static_cast<int>(ClassOf(t));
  return Reg{t, reg_count_[cls]++};
}

Label KernelBuilder::NewLabel(absl::string_view hint) {
  const Label l{static_cast<uint32_t>(label_names_.size())};
  std::string clean;
  for (char c : hint) clean += absl::ascii_isalnum(c) ? c : '_';
  label_names_.push_back(absl::StrCat("$L_", clean, "_", l.id));
  label_bound_.push_back(false);
  return l;
}

void KernelBuilder::Bind(Label l) {
  if (!ok()) return;
  if (l.id >= label_names_.size()) return Fail("binding an unknown label");
  if (label_bound_[l.id]) return Fail(absl::StrCat("label ", label_names_[l.id], " bound twice"));
  if (!guard_.empty()) return Fail("a label cannot be placed under a guard");
  label_bound_[l.id] = true;
  absl::StrAppend(&body_, label_names_[l.id], ":\n");
  last_was_ret_ = false;
}

void KernelBuilder::Bra(Label l) {
  if (l.id >= label_names_.size()) return Fail("branch to an unknown label");
  Line("bra", {label_names_[l.id]});
}

void KernelBuilder::BraIf(Reg pred, Label l, bool if_false) {
  if (!CheckDst(pred, Type::kPred, "bra predicate")) return;
  if (!guard_.empty()) return Fail("a conditional branch cannot sit under another guard");
  if (l.id >= label_names_.size()) return Fail("branch to an unknown label");
  absl::StrAppend(&body_, "\t@", if_false ? "!" : "", pred.Name(), " bra \t", label_names_[l.id],
                  ";\n");
  last_was_ret_ = false;
}

void KernelBuilder::Ret() {
  Line("ret", {});
  last_was_ret_ = guard_.empty();
}

void KernelBuilder::Comment(absl::string_view text) {
  if (ok()) absl::StrAppend(&body_, "\t// ", text, "\n");
}

KernelBuilder::ScopedGuard::ScopedGuard(KernelBuilder* kb, Reg pred, bool negate) : kb_(kb) {
  if (!kb_->guard_.empty()) {
    kb_->Fail("guards do not nest; combine the predicates with and.pred");
  } else if (kb_->CheckDst(pred, Type::kPred, "guard")) {
    kb_->guard_ = absl::StrCat("@", negate ? "!" : "", pred.Name(), " ");
  }
}

KernelBuilder::ScopedGuard::~ScopedGuard() { kb_->guard_.clear(); }

absl::StatusOr<std::string> KernelBuilder::Finish(const std::vector<std::string>& header) {
  for (size_t i = 0; i < label_names_.size() && ok(); ++i) {
    if (!label_bound_[i]) Fail(absl::StrCat("label ", label_names_[i], " is never placed"));
  }
  if (!guard_.empty()) Fail("Finish() called inside a guard");
  if (!ok()) return status_;

  std::string out = "//\n// Generated by ptxserve's PTX builder. Do not edit.\n";
  for (const std::string& h : header) absl::StrAppend(&out, "// ", h, "\n");
  absl::StrAppend(&out, "//\n\n.version ", target_.VersionText(), "\n.target ", target_.SmName(),
                  "\n.address_size 64\n\n");
  if (dynamic_shared_align_ > 0) {
    absl::StrAppend(&out, ".extern .shared .align ", dynamic_shared_align_, " .b8 ", kDynSharedName,
                    "[];\n\n");
  }
  absl::StrAppend(&out, ".visible .entry ", name_, "(");
  for (size_t i = 0; i < params_.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "\n" : ",\n", "\t.param .", TypeName(params_[i].type), " ",
                    params_[i].name);
  }
  absl::StrAppend(&out, "\n)\n");
  if (maxntid_[0] > 0) {
    absl::StrAppend(&out, ".maxntid ", maxntid_[0], ", ", maxntid_[1], ", ", maxntid_[2], "\n");
  }
  out += "{\n";
  for (int c = 0; c < kNumRegClasses; ++c) {
    if (reg_count_[c] == 0) continue;
    static constexpr absl::string_view kPrefix[kNumRegClasses] = {"%p", "%rs", "%r",
                                                                  "%f", "%rd", "%fd"};
    absl::StrAppend(&out, "\t.reg ", kRegDecl[c], " \t", kPrefix[c], "<", reg_count_[c], ">;\n");
  }
  for (const Shared_& s : shared_) {
    absl::StrAppend(&out, "\t.shared .align ", s.align, " .b8 ", s.name, "[", s.bytes, "];\n");
  }
  out += "\n";
  out += body_;
  if (!last_was_ret_) out += "\tret;\n";
  out += "}\n";
  return out;
}

}  // namespace ptxserve::ptx
