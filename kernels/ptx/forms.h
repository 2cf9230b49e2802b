// The instruction table: every arithmetic, logic, comparison, atomic, tensor-core and
// asynchronous-copy form the builder can write, with its operand roles, the types it
// accepts and the oldest architecture / PTX ISA that has it. The builder checks each
// instruction against this table before writing it, so an unsupported combination is an
// error instead of PTX that ptxas rejects.
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
  kBfe,    // bit-field extract: d = bits [b, b + c) of a, sign-extended for .s types
  kPrmt,   // byte permute: byte i of d is byte (c >> 4i) & 7 of {b, a} (the default mode)
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
  kMmaM16N8K16,  // mma.sync.aligned.m16n8k16.row.col.f32.<t>.<t>.f32
  kMmaM16N8K8,
  kLdmatrix,       // ldmatrix.sync.aligned.m8n8.x<n>[.trans].shared.b16
  kCpAsyncCa,      // cp.async.ca.shared.global: 4, 8 or 16 bytes, cached in L1 and L2
  kCpAsyncCg,      // cp.async.cg.shared.global: 16 bytes, cached in L2 only
  kCpAsyncCommit,  // cp.async.commit_group
  kCpAsyncWait,    // cp.async.wait_group N
  kCpAsyncWaitAll,
  kGridDepLaunchDependents,  // griddepcontrol.launch_dependents (programmatic dependent launch)
  kGridDepWait,              // griddepcontrol.wait
};

// One row of the table. `sig` lists operand roles, destination first:
//   d  destination of the instruction type T      s  source of type T (register/immediate)
//   w  destination of twice T's width              x  source of twice T's width
//   u  u32 source (shift amount, lane, mask)       p  predicate source
//   P  predicate destination                       A  memory address
//   F  brace vector of registers (a fragment)      S  shared address
//   G  global address                              i  integer constant
struct Form {
  Op op;
  absl::string_view text;  // opcode with fixed modifiers, before the type suffix
  absl::string_view sig;
  uint32_t types;  // Bit(Type) set; 0 for instructions without a type suffix
  int min_sm;
  int min_ptx;  // x10
};

// The first row for `op` that accepts `t`, or nullptr.
const Form* FindForm(Op op, Type t);
// The row of an instruction without a type suffix (cp.async, griddepcontrol), or nullptr.
const Form* FindUntypedForm(Op op);
// The opcode text of the first row for `op` (for error messages).
absl::string_view OpName(Op op);

}  // namespace ptxserve::ptx
