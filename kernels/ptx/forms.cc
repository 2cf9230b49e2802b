#include "kernels/ptx/forms.h"

#include <iterator>

namespace ptxserve::ptx {
namespace {

constexpr uint32_t B(Type t) { return Bit(t); }
constexpr uint32_t kInts =
    B(Type::kU16) | B(Type::kS16) | B(Type::kU32) | B(Type::kS32) | B(Type::kU64) | B(Type::kS64);
constexpr uint32_t kSigned = B(Type::kS16) | B(Type::kS32) | B(Type::kS64);
constexpr uint32_t kNarrowInts = B(Type::kU16) | B(Type::kS16) | B(Type::kU32) | B(Type::kS32);
constexpr uint32_t kBits = B(Type::kB16) | B(Type::kB32) | B(Type::kB64);
constexpr uint32_t kF = B(Type::kF32) | B(Type::kF64);
constexpr uint32_t kF32 = B(Type::kF32);
constexpr uint32_t kH = B(Type::kF16) | B(Type::kF16x2);
constexpr uint32_t kBH = B(Type::kBF16) | B(Type::kBF16x2);
constexpr uint32_t kPred = B(Type::kPred);
constexpr uint32_t kStd = kInts | kBits | kF;  // types every generic data instruction has

// Ordered: FindForm returns the first matching row, so plain rows precede the
// half-precision rows that need newer hardware.
constexpr Form kForms[] = {
    {Op::kAdd, "add", "dss", kInts | kF, 20, 40},
    {Op::kAdd, "add", "dss", kH, 53, 42},
    {Op::kAdd, "add.rn", "dss", kBH, 90, 78},
    {Op::kSub, "sub", "dss", kInts | kF, 20, 40},
    {Op::kSub, "sub", "dss", kH, 53, 42},
    {Op::kSub, "sub.rn", "dss", kBH, 90, 78},
    {Op::kMul, "mul", "dss", kF, 20, 40},
    {Op::kMul, "mul", "dss", kH, 53, 42},
    {Op::kMul, "mul.rn", "dss", kBH, 90, 78},
    {Op::kMulLo, "mul.lo", "dss", kInts, 20, 40},
    {Op::kMulHi, "mul.hi", "dss", kInts, 20, 40},
    {Op::kMulWide, "mul.wide", "wss", kNarrowInts, 20, 40},
    {Op::kMadLo, "mad.lo", "dsss", kInts, 20, 40},
    {Op::kMadWide, "mad.wide", "wssx", kNarrowInts, 20, 40},
    {Op::kFma, "fma.rn", "dsss", kF, 20, 40},
    {Op::kFma, "fma.rn", "dsss", kH, 53, 42},
    {Op::kFma, "fma.rn", "dsss", kBH, 80, 70},
    {Op::kMin, "min", "dss", kInts | kF, 20, 40},
    {Op::kMin, "min", "dss", kH | kBH, 80, 70},
    {Op::kMax, "max", "dss", kInts | kF, 20, 40},
    {Op::kMax, "max", "dss", kH | kBH, 80, 70},
    {Op::kNeg, "neg", "ds", kSigned | kF, 20, 40},
    {Op::kNeg, "neg", "ds", kH, 53, 60},
    {Op::kNeg, "neg", "ds", kBH, 80, 70},
    {Op::kAbs, "abs", "ds", kSigned | kF, 20, 40},
    {Op::kAbs, "abs", "ds", kH | kBH, 80, 70},
    {Op::kDiv, "div", "dss", kInts, 20, 40},
    {Op::kDiv, "div.rn", "dss", kF, 20, 40},
    {Op::kRem, "rem", "dss", kInts, 20, 40},
    {Op::kAnd, "and", "dss", kPred | kBits, 20, 40},
    {Op::kOr, "or", "dss", kPred | kBits, 20, 40},
    {Op::kXor, "xor", "dss", kPred | kBits, 20, 40},
    {Op::kNot, "not", "ds", kPred | kBits, 20, 40},
    {Op::kShl, "shl", "dsu", kBits, 20, 40},
    {Op::kShr, "shr", "dsu", kBits | kInts, 20, 40},
    {Op::kBfe, "bfe", "dsuu", B(Type::kU32) | B(Type::kS32) | B(Type::kU64) | B(Type::kS64), 20,
     40},
    {Op::kPrmt, "prmt", "dsss", B(Type::kB32), 20, 40},
    {Op::kEx2, "ex2.approx.ftz", "ds", kF32, 20, 40},
    {Op::kEx2, "ex2.approx", "ds", kH, 75, 70},
    {Op::kLg2, "lg2.approx.ftz", "ds", kF32, 20, 40},
    {Op::kRcp, "rcp.approx.ftz", "ds", kF32, 20, 40},
    {Op::kRcpRn, "rcp.rn", "ds", kF, 20, 40},
    {Op::kRsqrt, "rsqrt.approx.ftz", "ds", kF32, 20, 40},
    {Op::kSqrt, "sqrt.rn", "ds", kF, 20, 40},
    {Op::kSin, "sin.approx.ftz", "ds", kF32, 20, 40},
    {Op::kCos, "cos.approx.ftz", "ds", kF32, 20, 40},
    {Op::kMov, "mov", "ds", kStd | kPred, 20, 40},
    {Op::kSelp, "selp", "dssp", kStd, 20, 40},
    {Op::kSetp, "setp", "Pss", kStd, 20, 40},
    {Op::kSetp, "setp", "Pss", B(Type::kF16), 53, 42},
    {Op::kSetp, "setp", "Pss", B(Type::kBF16), 90, 78},
    {Op::kShfl, "shfl.sync", "dsuuu", B(Type::kB32), 30, 60},
    {Op::kAtomAdd, "add", "dAs", B(Type::kU32) | B(Type::kS32) | B(Type::kU64) | kF32, 20, 40},
    {Op::kAtomAdd, "add", "dAs", B(Type::kF64), 60, 50},
    {Op::kAtomMin, "min", "dAs", B(Type::kU32) | B(Type::kS32) | B(Type::kU64) | B(Type::kS64), 32,
     40},
    {Op::kAtomMax, "max", "dAs", B(Type::kU32) | B(Type::kS32) | B(Type::kU64) | B(Type::kS64), 32,
     40},
    {Op::kAtomExch, "exch", "dAs", B(Type::kB32) | B(Type::kB64), 20, 40},
    {Op::kAtomCas, "cas", "dAss", B(Type::kB32) | B(Type::kB64), 20, 40},
    {Op::kAtomAnd, "and", "dAs", B(Type::kB32) | B(Type::kB64), 32, 40},
    {Op::kAtomOr, "or", "dAs", B(Type::kB32) | B(Type::kB64), 32, 40},
    {Op::kAtomXor, "xor", "dAs", B(Type::kB32) | B(Type::kB64), 32, 40},
    {Op::kMmaM16N8K16, "mma.sync.aligned.m16n8k16.row.col", "FFFF", B(Type::kF16) | B(Type::kBF16),
     80, 70},
    {Op::kMmaM16N8K8, "mma.sync.aligned.m16n8k8.row.col", "FFFF", B(Type::kF16), 75, 65},
    {Op::kMmaM16N8K8, "mma.sync.aligned.m16n8k8.row.col", "FFFF", B(Type::kBF16), 80, 70},
    {Op::kLdmatrix, "ldmatrix.sync.aligned.m8n8", "FS", B(Type::kB16), 75, 65},
    {Op::kCpAsyncCa, "cp.async.ca.shared.global", "SGi", 0, 80, 70},
    {Op::kCpAsyncCg, "cp.async.cg.shared.global", "SGi", 0, 80, 70},
    {Op::kCpAsyncCommit, "cp.async.commit_group", "", 0, 80, 70},
    {Op::kCpAsyncWait, "cp.async.wait_group", "i", 0, 80, 70},
    {Op::kCpAsyncWaitAll, "cp.async.wait_all", "", 0, 80, 70},
    {Op::kGridDepLaunchDependents, "griddepcontrol.launch_dependents", "", 0, 90, 78},
    {Op::kGridDepWait, "griddepcontrol.wait", "", 0, 90, 78},
};

}  // namespace

const Form* FindForm(Op op, Type t) {
  for (const Form& f : kForms) {
    if (f.op == op && (f.types & Bit(t)) != 0) return &f;
  }
  return nullptr;
}

const Form* FindUntypedForm(Op op) {
  for (const Form& f : kForms) {
    if (f.op == op && f.types == 0) return &f;
  }
  return nullptr;
}

absl::string_view OpName(Op op) {
  for (const Form& f : kForms) {
    if (f.op == op) return f.text;
  }
  return "?";
}

}  // namespace ptxserve::ptx
