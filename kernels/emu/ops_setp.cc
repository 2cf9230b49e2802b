// setp for every comparable type (ordered and unordered float comparisons, signed and
// unsigned integer ones, optional .and/.or/.xor with a third predicate) and .pred logic.
#include <cmath>
#include <type_traits>

#include "kernels/emu/ops.h"

namespace ptxserve::emu {
namespace {

template <class T, class Conv, class C>
uint32_t CmpLoop(const uint64_t* a, const uint64_t* b, uint32_t m, Conv conv, C cmp) {
  uint32_t r = 0;
  ForLanes(m, [&](uint32_t l) { r |= static_cast<uint32_t>(cmp(conv(a[l]), conv(b[l]))) << l; });
  return r;
}

template <class T, class Conv>
uint32_t Compare(Cmp c, const uint64_t* a, const uint64_t* b, uint32_t m, Conv cv) {
  auto nan = [](T x) {
    if constexpr (std::is_floating_point_v<T>) {
      return std::isnan(x);
    } else {
      (void)x;
      return false;
    }
  };
  using U = std::make_unsigned_t<std::conditional_t<std::is_floating_point_v<T>, int, T>>;
  switch (c) {
    case Cmp::kEq:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return x == y; });
    case Cmp::kNe:
      return CmpLoop<T>(a, b, m, cv, [&](T x, T y) { return x != y && !nan(x) && !nan(y); });
    case Cmp::kLt:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return x < y; });
    case Cmp::kLe:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return x <= y; });
    case Cmp::kGt:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return x > y; });
    case Cmp::kGe:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return x >= y; });
    case Cmp::kLo:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return U(x) < U(y); });
    case Cmp::kLs:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return U(x) <= U(y); });
    case Cmp::kHi:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return U(x) > U(y); });
    case Cmp::kHs:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return U(x) >= U(y); });
    case Cmp::kEqu:
      return CmpLoop<T>(a, b, m, cv, [&](T x, T y) { return x == y || nan(x) || nan(y); });
    case Cmp::kNeu:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return x != y; });
    case Cmp::kLtu:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return !(x >= y); });
    case Cmp::kLeu:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return !(x > y); });
    case Cmp::kGtu:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return !(x <= y); });
    case Cmp::kGeu:
      return CmpLoop<T>(a, b, m, cv, [](T x, T y) { return !(x < y); });
    case Cmp::kNum:
      return CmpLoop<T>(a, b, m, cv, [&](T x, T y) { return !nan(x) && !nan(y); });
    case Cmp::kNan:
      return CmpLoop<T>(a, b, m, cv, [&](T x, T y) { return nan(x) || nan(y); });
  }
  return 0;
}

void WriteSetp(Warp& w, const Instr& in, uint32_t m, uint32_t r) {
  uint32_t q = ~r;
  const BoolOp bop = static_cast<BoolOp>(in.mode2);
  if (bop != BoolOp::kNone) {
    const uint32_t c = in.ps_neg[0] ? ~w.preds[in.ps[0]] : w.preds[in.ps[0]];
    switch (bop) {
      case BoolOp::kAnd:
        r &= c;
        q &= c;
        break;
      case BoolOp::kOr:
        r |= c;
        q |= c;
        break;
      case BoolOp::kXor:
        r ^= c;
        q ^= c;
        break;
      case BoolOp::kNone:
        break;
    }
  }
  uint32_t& p = w.preds[in.pd[0]];
  p = (p & ~m) | (r & m);
  w.pinit[in.pd[0]] |= m;
  if (in.has_pd2) {
    uint32_t& p2 = w.preds[in.pd[1]];
    p2 = (p2 & ~m) | (q & m);
    w.pinit[in.pd[1]] |= m;
  }
}

template <class T>
bool Setp(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  const uint32_t r = Compare<T>(static_cast<Cmp>(in.mode), w.R(in.s[0]), w.R(in.s[1]), m,
                                [](uint64_t v) { return Get<T>(v); });
  WriteSetp(w, in, m, r);
  return true;
}

template <float (*Conv)(uint16_t)>
bool SetpHalf(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  const uint32_t r = Compare<float>(static_cast<Cmp>(in.mode), w.R(in.s[0]), w.R(in.s[1]), m,
                                    [](uint64_t v) { return Conv(static_cast<uint16_t>(v)); });
  WriteSetp(w, in, m, r);
  return true;
}

// ---- .pred logic --------------------------------------------------------------------------

uint32_t PredSrc(const Warp& w, const Instr& in, int i) {
  return in.ps_neg[i] ? ~w.preds[in.ps[i]] : w.preds[in.ps[i]];
}
template <Op kOp>
bool PredLogic(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  const uint32_t a = PredSrc(w, in, 0);
  uint32_t r = 0;
  if constexpr (kOp == Op::kAnd) r = a & PredSrc(w, in, 1);
  if constexpr (kOp == Op::kOr) r = a | PredSrc(w, in, 1);
  if constexpr (kOp == Op::kXor) r = a ^ PredSrc(w, in, 1);
  if constexpr (kOp == Op::kNot) r = ~a;
  if constexpr (kOp == Op::kMov) r = a;
  uint32_t& p = w.preds[in.pd[0]];
  p = (p & ~m) | (r & m);
  w.pinit[in.pd[0]] |= m;
  return true;
}

}  // namespace

Handler SelectSetp(Ty t) {
  switch (t) {
    case Ty::kU16:
    case Ty::kB16:
      return &Setp<uint16_t>;
    case Ty::kS16:
      return &Setp<int16_t>;
    case Ty::kU32:
    case Ty::kB32:
      return &Setp<uint32_t>;
    case Ty::kS32:
      return &Setp<int32_t>;
    case Ty::kU64:
    case Ty::kB64:
      return &Setp<uint64_t>;
    case Ty::kS64:
      return &Setp<int64_t>;
    case Ty::kF32:
      return &Setp<float>;
    case Ty::kF64:
      return &Setp<double>;
    case Ty::kF16:
      return &SetpHalf<&HalfToF32>;
    case Ty::kBF16:
      return &SetpHalf<&BF16ToF32>;
    default:
      return nullptr;
  }
}

Handler SelectPredLogic(Op op) {
  switch (op) {
    case Op::kAnd:
      return &PredLogic<Op::kAnd>;
    case Op::kOr:
      return &PredLogic<Op::kOr>;
    case Op::kXor:
      return &PredLogic<Op::kXor>;
    case Op::kNot:
      return &PredLogic<Op::kNot>;
    case Op::kMov:
      return &PredLogic<Op::kMov>;
    default:
      return nullptr;
  }
}

}  // namespace ptxserve::emu
