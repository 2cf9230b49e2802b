// The instruction table: every arithmetic, logic, comparison and atomic form the
// builder can write, with its operand roles, the types it accepts and the oldest
// architecture / PTX ISA that has it. The builder checks each instruction against
// this table before writing it, so an unsupported combination is an error instead of
// PTX that ptxas rejects.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"
#include "kernels/ptx/types.h"

namespace ptxserve::ptx {

enum class Op : uint8_t {
  kAdd,
  kSub,
  kMul,      // float multiply
  kMulLo,    // integer multiply, low half
  kMulHi,    // integer multiply, high half
  kMulWide,  // 16x16->32 or 32x32->64
  kMadLo,
  kMadWide,
  kFma,
  kMin,
  kMax,
  kNeg,
  kAbs,
  kDiv,  // integer division, or IEEE-rounded float division
  kRem,
  kAnd,
  kOr,
  kXor,
  kNot,
  kShl,
  kShr,
  kEx2,    // 2^x, approximate
  kLg2,    // log2(x), approximate
  kRcp,    // 1/x, approximate
  kRcpRn,  // 1/x, IEEE round to nearest
  kRsqrt,  // 1/sqrt(x), approximate
  kSqrt,   // IEEE round to nearest
  kSin,    // approximate, for |x| <= pi
  kCos,    // approximate, for |x| <= pi
  kMov,
  kSelp,
  kSetp,
  kShfl,
  kAtomAdd,
  kAtomMin,
  kAtomMax,
  kAtomExch,
  kAtomCas,
  kAtomAnd,
  kAtomOr,
  kAtomXor,
};

// One row of the table. `sig` lists operand roles, destination first:
//   d  destination of the instruction type T      s  source of type T (register/immediate)
//   w  destination of twice T's width              x  source of twice T's width
//   u  u32 source (shift amount, lane, mask)       p  predicate source
//   P  predicate destination                       A  memory address
struct Form {
  Op op;
  absl::string_view text;  // opcode with fixed modifiers, before the type suffix
  absl::string_view sig;
  uint32_t types;  // Bit(Type) set
  int min_sm;
  int min_ptx;  // x10
};

// The first row for `op` that accepts `t`, or nullptr.
const Form* FindForm(Op op, Type t);
// The opcode text of the first row for `op` (for error messages).
absl::string_view OpName(Op op);

}  // namespace ptxserve::ptx
