// Names and sizes of PTX types and opcodes.
#include <string>
#include <string_view>
#include <utility>

#include "kernels/emu/decoder.h"

namespace ptxserve::emu {

int TySize(Ty t) {
  switch (t) {
    case Ty::kB8:
    case Ty::kU8:
    case Ty::kS8:
      return 1;
    case Ty::kB16:
    case Ty::kU16:
    case Ty::kS16:
    case Ty::kF16:
    case Ty::kBF16:
      return 2;
    case Ty::kB32:
    case Ty::kU32:
    case Ty::kS32:
    case Ty::kF32:
    case Ty::kF16x2:
    case Ty::kBF16x2:
      return 4;
    case Ty::kB64:
    case Ty::kU64:
    case Ty::kS64:
    case Ty::kF64:
      return 8;
    case Ty::kB128:
      return 16;
    default:
      return 0;
  }
}
bool TyIsFloat(Ty t) {
  return t == Ty::kF16 || t == Ty::kF16x2 || t == Ty::kBF16 || t == Ty::kBF16x2 || t == Ty::kF32 ||
         t == Ty::kF64;
}
bool TyIsSigned(Ty t) { return t == Ty::kS8 || t == Ty::kS16 || t == Ty::kS32 || t == Ty::kS64; }
bool TyIsBits(Ty t) {
  return t == Ty::kB8 || t == Ty::kB16 || t == Ty::kB32 || t == Ty::kB64 || t == Ty::kB128;
}

namespace {
constexpr std::pair<const char*, Ty> kTyNames[] = {
    {"pred", Ty::kPred}, {"b8", Ty::kB8},         {"b16", Ty::kB16}, {"b32", Ty::kB32},
    {"b64", Ty::kB64},   {"b128", Ty::kB128},     {"u8", Ty::kU8},   {"u16", Ty::kU16},
    {"u32", Ty::kU32},   {"u64", Ty::kU64},       {"s8", Ty::kS8},   {"s16", Ty::kS16},
    {"s32", Ty::kS32},   {"s64", Ty::kS64},       {"f16", Ty::kF16}, {"f16x2", Ty::kF16x2},
    {"bf16", Ty::kBF16}, {"bf16x2", Ty::kBF16x2}, {"f32", Ty::kF32}, {"f64", Ty::kF64},
};
constexpr const char* kOpNames[] = {
#define EMU_OP_NAME(name, text) text,
    EMU_OPCODES(EMU_OP_NAME)
#undef EMU_OP_NAME
};
}  // namespace

const char* TyName(Ty t) {
  for (const auto& [n, ty] : kTyNames) {
    if (ty == t) return n;
  }
  return "none";
}
bool ParseTy(std::string_view s, Ty* t) {
  for (const auto& [n, ty] : kTyNames) {
    if (s == n) {
      *t = ty;
      return true;
    }
  }
  return false;
}

const char* OpName(Op op) { return op < Op::kCount ? kOpNames[static_cast<int>(op)] : "?"; }
bool ParseOpName(const std::string& s, Op* op) {
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
    if (s == kOpNames[i]) {
      *op = static_cast<Op>(i);
      return true;
    }
  }
  return false;
}

}  // namespace ptxserve::emu
