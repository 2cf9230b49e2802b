// Value types, targets, registers and operands of the PTX builder.
//
// Registers are virtual and typed: each carries the PTX type it was created with
// and belongs to one declaration class (.pred, .b16, .b32, .f32, .b64, .f64) whose
// `.reg` line the builder writes once, in front of the body, when the kernel is done.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ptxserve::ptx {

enum class Type : uint8_t {
  kPred,
  kB16,
  kU16,
  kS16,
  kF16,
  kBF16,
  kB32,
  kU32,
  kS32,
  kF32,
  kF16x2,
  kBF16x2,
  kB64,
  kU64,
  kS64,
  kF64,
};
inline constexpr int kNumTypes = 16;

enum class TypeKind : uint8_t { kPred, kBits, kUnsigned, kSigned, kFloat };

// Declaration class of a register: the `.reg` type and the name prefix.
enum class RegClass : uint8_t { kPred, kB16, kB32, kF32, kB64, kF64 };
inline constexpr int kNumRegClasses = 6;

// "f32", "u64", "pred", ... (no leading dot).
absl::string_view TypeName(Type t);
// Size in bits (1 for predicates).
int TypeBits(Type t);
TypeKind KindOf(Type t);
RegClass ClassOf(Type t);
// True for f16, bf16 and their packed pairs: they never take immediates.
bool IsHalfFloat(Type t);
// Bit mask of a type, for the instruction table's type sets.
constexpr uint32_t Bit(Type t) { return 1u << static_cast<unsigned>(t); }

// The GPU architecture and PTX ISA version a module is written for. One place decides
// both, so every kernel of a module agrees on them.
struct Target {
  int sm = 80;           // 80, 86, 89 or 90
  int ptx_version = 78;  // ISA version x10; 7.8 is the newest that ptxas 11.8 accepts

  // Error when the pair is unknown or the ISA is too old for the architecture.
  absl::Status Validate() const;
  std::string SmName() const;       // "sm_80"
  std::string VersionText() const;  // "7.8"
  // "sm80_ptx78", part of kernel cache keys.
  std::string Key() const;
  bool operator==(const Target&) const = default;
};

// A typed virtual register. id is the index within its class.
struct Reg {
  Type type = Type::kB32;
  uint32_t id = 0;

  std::string Name() const;  // "%f12"
  bool operator==(const Reg&) const = default;
};

// A named `.shared` array (static or extern dynamic) or a `.param` slot.
struct Symbol {
  std::string name;
};

// One instruction operand: a register, an integer or float immediate, a memory
// address ([reg+offset] or [symbol+offset]), a brace vector of registers, or a symbol.
class Operand {
 public:
  enum class Kind : uint8_t { kNone, kReg, kImmInt, kImmF32, kImmF64, kAddr, kVec, kSymbol };

  Operand() = default;
  Operand(Reg r) : kind_(Kind::kReg), reg_(r) {}          // NOLINT: registers are operands
  Operand(int v) : kind_(Kind::kImmInt), imm_(v) {}       // NOLINT: so are integer literals
  Operand(int64_t v) : kind_(Kind::kImmInt), imm_(v) {}   // NOLINT
  Operand(uint32_t v) : kind_(Kind::kImmInt), imm_(v) {}  // NOLINT

  static Operand F32(float v);
  static Operand F64(double v);
  // [base + offset]; base is a 64-bit (global) or 32-bit (shared) address register.
  static Operand Addr(Reg base, int64_t offset = 0);
  // [symbol + offset].
  static Operand Addr(const Symbol& sym, int64_t offset = 0);
  static Operand Vec(std::vector<Reg> regs);
  static Operand Sym(const Symbol& sym);

  Kind kind() const { return kind_; }
  const Reg& reg() const { return reg_; }
  int64_t imm() const { return imm_; }
  double fimm() const { return fimm_; }
  bool addr_has_reg() const { return addr_has_reg_; }
  const std::string& symbol() const { return symbol_; }
  const std::vector<Reg>& vec() const { return vec_; }
  bool is_reg() const { return kind_ == Kind::kReg; }
  bool is_imm() const {
    return kind_ == Kind::kImmInt || kind_ == Kind::kImmF32 || kind_ == Kind::kImmF64;
  }

  // PTX text of the operand; float immediates are written in exact hex (0f3F800000).
  std::string Text() const;

 private:
  Kind kind_ = Kind::kNone;
  Reg reg_;
  int64_t imm_ = 0;
  double fimm_ = 0;
  bool addr_has_reg_ = false;
  std::string symbol_;
  std::vector<Reg> vec_;
};

}  // namespace ptxserve::ptx
