// f32/f64 arithmetic and special functions. Host IEEE arithmetic gives round-to-nearest
// results (the build does not contract a*b+c, and fma maps to std::fma); .ftz flushes
// subnormal inputs and results, .sat clamps to [0, 1] with NaN -> 0. The .approx
// functions use the correctly rounded host functions, which lie within PTX's error bounds.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/emu/ops.h"

namespace ptxserve::emu {
namespace {

template <class T, bool kFtz>
inline T In(T x) {
  if constexpr (kFtz && std::is_same_v<T, float>) return FlushF32(x);
  return x;
}
template <class T, bool kFtz, bool kSat>
inline T Out(T x) {
  if constexpr (kFtz && std::is_same_v<T, float>) x = FlushF32(x);
  if constexpr (kSat) x = std::isnan(x) ? T(0) : std::clamp(x, T(0), T(1));
  return x;
}

template <class T, class F, bool kFtz, bool kSat>
bool FBin(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map2<T, T, T>(w, in, m,
                [](T a, T b) { return Out<T, kFtz, kSat>(F{}(In<T, kFtz>(a), In<T, kFtz>(b))); });
  return true;
}
template <class T, class F, bool kFtz, bool kSat>
bool FUn(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map1<T, T>(w, in, m, [](T a) { return Out<T, kFtz, kSat>(F{}(In<T, kFtz>(a))); });
  return true;
}
template <class T, bool kFtz, bool kSat>
bool FFma(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map3<T, T, T, T>(w, in, m, [](T a, T b, T c) {
    return Out<T, kFtz, kSat>(std::fma(In<T, kFtz>(a), In<T, kFtz>(b), In<T, kFtz>(c)));
  });
  return true;
}

struct AddF {
  template <class T>
  T operator()(T a, T b) const {
    return a + b;
  }
};
struct SubF {
  template <class T>
  T operator()(T a, T b) const {
    return a - b;
  }
};
struct MulF {
  template <class T>
  T operator()(T a, T b) const {
    return a * b;
  }
};
struct DivF {
  template <class T>
  T operator()(T a, T b) const {
    return a / b;
  }
};
// min/max: a NaN operand yields the other; min(-0, +0) is -0.
struct MinF {
  template <class T>
  T operator()(T a, T b) const {
    if (a == b) return std::signbit(a) ? a : b;
    return std::fmin(a, b);
  }
};
struct MaxF {
  template <class T>
  T operator()(T a, T b) const {
    if (a == b) return std::signbit(a) ? b : a;
    return std::fmax(a, b);
  }
};
struct CopysignF {
  template <class T>
  T operator()(T a, T b) const {
    return std::copysign(b, a);  // PTX: copy the sign of a onto b
  }
};
struct NegF {
  template <class T>
  T operator()(T a) const {
    return -a;
  }
};
struct AbsF {
  template <class T>
  T operator()(T a) const {
    return std::fabs(a);
  }
};
struct RcpF {
  template <class T>
  T operator()(T a) const {
    return T(1) / a;
  }
};
struct SqrtF {
  template <class T>
  T operator()(T a) const {
    return std::sqrt(a);
  }
};
struct RsqrtF {
  template <class T>
  T operator()(T a) const {
    return T(1) / std::sqrt(a);
  }
};
struct Ex2F {
  template <class T>
  T operator()(T a) const {
    return std::exp2(a);
  }
};
struct Lg2F {
  template <class T>
  T operator()(T a) const {
    return std::log2(a);
  }
};
struct SinF {
  template <class T>
  T operator()(T a) const {
    return std::sin(a);
  }
};
struct CosF {
  template <class T>
  T operator()(T a) const {
    return std::cos(a);
  }
};
struct TanhF {
  template <class T>
  T operator()(T a) const {
    return std::tanh(a);
  }
};

template <class T, bool kFtz, bool kSat>
Handler Pick(Op op) {
  switch (op) {
    case Op::kAdd:
      return &FBin<T, AddF, kFtz, kSat>;
    case Op::kSub:
      return &FBin<T, SubF, kFtz, kSat>;
    case Op::kMul:
      return &FBin<T, MulF, kFtz, kSat>;
    case Op::kDiv:
      return &FBin<T, DivF, kFtz, kSat>;
    case Op::kMin:
      return &FBin<T, MinF, kFtz, kSat>;
    case Op::kMax:
      return &FBin<T, MaxF, kFtz, kSat>;
    case Op::kCopysign:
      return &FBin<T, CopysignF, false, false>;
    case Op::kFma:
    case Op::kMad:
      return &FFma<T, kFtz, kSat>;
    case Op::kNeg:
      return &FUn<T, NegF, kFtz, kSat>;
    case Op::kAbs:
      return &FUn<T, AbsF, kFtz, kSat>;
    case Op::kRcp:
      return &FUn<T, RcpF, kFtz, kSat>;
    case Op::kSqrt:
      return &FUn<T, SqrtF, kFtz, kSat>;
    case Op::kRsqrt:
      return &FUn<T, RsqrtF, kFtz, kSat>;
    case Op::kEx2:
      return &FUn<T, Ex2F, kFtz, kSat>;
    case Op::kLg2:
      return &FUn<T, Lg2F, kFtz, kSat>;
    case Op::kSin:
      return &FUn<T, SinF, kFtz, kSat>;
    case Op::kCos:
      return &FUn<T, CosF, kFtz, kSat>;
    case Op::kTanh:
      return &FUn<T, TanhF, kFtz, kSat>;
    default:
      return nullptr;
  }
}

}  // namespace

Handler SelectFloatOp(const OpSel& s) {
  // Directed rounding of arithmetic is not modelled: report it rather than round wrongly.
  if (s.rnd != Round::kNone && s.rnd != Round::kRn) return nullptr;
  if (s.type == Ty::kF32) {
    if (s.ftz) return s.sat ? Pick<float, true, true>(s.op) : Pick<float, true, false>(s.op);
    return s.sat ? Pick<float, false, true>(s.op) : Pick<float, false, false>(s.op);
  }
  if (s.type == Ty::kF64) {
    if (s.sat) return nullptr;
    return Pick<double, false, false>(s.op);
  }
  return nullptr;
}

}  // namespace ptxserve::emu
