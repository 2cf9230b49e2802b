#include "kernels/ptx/types.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ptxserve::ptx {
namespace {

struct TypeInfo {
  absl::string_view name;
  int bits;
  TypeKind kind;
  RegClass cls;
};

// Indexed by Type. Half floats live in .b16/.b32 registers as nvcc does: PTX has no
// .bf16 register type before 7.8 and bit registers take any instruction of their size.
constexpr TypeInfo kTypes[kNumTypes] = {
    {"pred", 1, TypeKind::kPred, RegClass::kPred},
    {"b16", 16, TypeKind::kBits, RegClass::kB16},
    {"u16", 16, TypeKind::kUnsigned, RegClass::kB16},
    {"s16", 16, TypeKind::kSigned, RegClass::kB16},
    {"f16", 16, TypeKind::kFloat, RegClass::kB16},
    {"bf16", 16, TypeKind::kFloat, RegClass::kB16},
    {"b32", 32, TypeKind::kBits, RegClass::kB32},
    {"u32", 32, TypeKind::kUnsigned, RegClass::kB32},
    {"s32", 32, TypeKind::kSigned, RegClass::kB32},
    {"f32", 32, TypeKind::kFloat, RegClass::kF32},
    {"f16x2", 32, TypeKind::kFloat, RegClass::kB32},
    {"bf16x2", 32, TypeKind::kFloat, RegClass::kB32},
    {"b64", 64, TypeKind::kBits, RegClass::kB64},
    {"u64", 64, TypeKind::kUnsigned, RegClass::kB64},
    {"s64", 64, TypeKind::kSigned, RegClass::kB64},
    {"f64", 64, TypeKind::kFloat, RegClass::kF64},
};

constexpr absl::string_view kClassPrefix[kNumRegClasses] = {"%p", "%rs", "%r", "%f", "%rd", "%fd"};

const TypeInfo& Info(Type t) { return kTypes[static_cast<int>(t)]; }

}  // namespace

absl::string_view TypeName(Type t) { return Info(t).name; }
int TypeBits(Type t) { return Info(t).bits; }
TypeKind KindOf(Type t) { return Info(t).kind; }
RegClass ClassOf(Type t) { return Info(t).cls; }
bool IsHalfFloat(Type t) {
  return t == Type::kF16 || t == Type::kBF16 || t == Type::kF16x2 || t == Type::kBF16x2;
}

absl::Status Target::Validate() const {
  int min_ptx = 0;
  switch (sm) {
    case 80:
      min_ptx = 70;
      break;
    case 86:
      min_ptx = 71;
      break;
    case 89:
    case 90:
      min_ptx = 78;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("target: unsupported architecture sm_", sm, " (want 80, 86, 89 or 90)"));
  }
  if (ptx_version < min_ptx || ptx_version > 90) {
    return absl::InvalidArgumentError(
        absl::StrFormat("target: PTX ISA %d.%d is not usable for sm_%d (want %d.%d to 9.0)",
                        ptx_version / 10, ptx_version % 10, sm, min_ptx / 10, min_ptx % 10));
  }
  return absl::OkStatus();
}

std::string Target::SmName() const { return absl::StrCat("sm_", sm); }
std::string Target::VersionText() const {
  return absl::StrCat(ptx_version / 10, ".", ptx_version % 10);
}
std::string Target::Key() const { return absl::StrCat("sm", sm, "_ptx", ptx_version); }

std::string Reg::Name() const {
  return absl::StrCat(kClassPrefix[static_cast<int>(ClassOf(type))], id);
}

Operand Operand::F32(float v) {
  Operand o;
  o.kind_ = Kind::kImmF32;
  o.fimm_ = v;
  return o;
}

Operand Operand::F64(double v) {
  Operand o;
  o.kind_ = Kind::kImmF64;
  o.fimm_ = v;
  return o;
}

Operand Operand::Addr(Reg base, int64_t offset) {
  Operand o;
  o.kind_ = Kind::kAddr;
  o.reg_ = base;
  o.addr_has_reg_ = true;
  o.imm_ = offset;
  return o;
}

Operand Operand::Addr(const Symbol& sym, int64_t offset) {
  Operand o;
  o.kind_ = Kind::kAddr;
  o.symbol_ = sym.name;
  o.imm_ = offset;
  return o;
}

Operand Operand::Vec(std::vector<Reg> regs) {
  Operand o;
  o.kind_ = Kind::kVec;
  o.vec_ = std::move(regs);
  return o;
}

Operand Operand::Sym(const Symbol& sym) {
  Operand o;
  o.kind_ = Kind::kSymbol;
  o.symbol_ = sym.name;
  return o;
}

std::string Operand::Text() const {
  switch (kind_) {
    case Kind::kNone:
      return "<none>";
    case Kind::kReg:
      return reg_.Name();
    case Kind::kImmInt:
      return absl::StrCat(imm_);
    case Kind::kImmF32: {
      const float f = static_cast<float>(fimm_);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      return absl::StrFormat("0f%08X", bits);
    }
    case Kind::kImmF64: {
      uint64_t bits;
      std::memcpy(&bits, &fimm_, 8);
      return absl::StrFormat("0d%016X", bits);
    }
    case Kind::kAddr: {
      std::string base = addr_has_reg_ ? reg_.Name() : symbol_;
      if (imm_ == 0) return absl::StrCat("[", base, "]");
      return absl::StrCat("[", base, imm_ > 0 ? "+" : "", imm_, "]");
    }
    case Kind::kVec:
      return absl::StrCat(
          "{",
          absl::StrJoin(vec_, ", ", [](std::string* out, const Reg& r) { out->append(r.Name()); }),
          "}");
    case Kind::kSymbol:
      return symbol_;
  }
  return "<bad operand>";
}

}  // namespace ptxserve::ptx
