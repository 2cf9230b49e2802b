// Integer and bit ALU handlers (add..prmt, bfind, shf, selp, mov). Arithmetic is done in
// unsigned types wide enough to make wrap-around defined, and division by zero / overflow
// yield fixed values instead of host traps.
#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>

#include "kernels/emu/ops.h"

namespace ptxserve::emu {
namespace {

template <class T>
using Wide = std::conditional_t<sizeof(T) < 4, uint32_t, std::make_unsigned_t<T>>;

template <class T>
constexpr int Bits() {
  return static_cast<int>(sizeof(T) * 8);
}

template <class T, class F>
bool Bin(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map2<T, T, T>(w, in, m, F{});
  return true;
}
template <class T, class F>
bool Un(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map1<T, T>(w, in, m, F{});
  return true;
}

template <class T>
struct AddF {
  T operator()(T a, T b) const { return static_cast<T>(Wide<T>(a) + Wide<T>(b)); }
};
template <class T>
struct SubF {
  T operator()(T a, T b) const { return static_cast<T>(Wide<T>(a) - Wide<T>(b)); }
};
struct AddSatS32 {
  int32_t operator()(int32_t a, int32_t b) const {
    const int64_t r = int64_t{a} + b;
    return static_cast<int32_t>(std::clamp<int64_t>(r, INT32_MIN, INT32_MAX));
  }
};
struct SubSatS32 {
  int32_t operator()(int32_t a, int32_t b) const {
    const int64_t r = int64_t{a} - b;
    return static_cast<int32_t>(std::clamp<int64_t>(r, INT32_MIN, INT32_MAX));
  }
};
template <class T>
struct MulLoF {
  T operator()(T a, T b) const { return static_cast<T>(Wide<T>(a) * Wide<T>(b)); }
};
template <class T>
T MulHi(T a, T b) {
  if constexpr (sizeof(T) == 8) {
    using P = std::conditional_t<std::is_signed_v<T>, __int128, unsigned __int128>;
    return static_cast<T>((static_cast<P>(a) * static_cast<P>(b)) >> 64);
  } else {
    using P = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
    return static_cast<T>((static_cast<P>(a) * static_cast<P>(b)) >> Bits<T>());
  }
}
template <class T>
struct MulHiF {
  T operator()(T a, T b) const { return MulHi(a, b); }
};
template <class T>
struct DivF {
  T operator()(T a, T b) const {
    if (b == 0) return static_cast<T>(-1);
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return static_cast<T>(Wide<T>(0) - Wide<T>(a));
    }
    return static_cast<T>(a / b);
  }
};
template <class T>
struct RemF {
  T operator()(T a, T b) const {
    if (b == 0) return a;
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return 0;
    }
    return static_cast<T>(a % b);
  }
};
template <class T>
struct MinF {
  T operator()(T a, T b) const { return a < b ? a : b; }
};
template <class T>
struct MaxF {
  T operator()(T a, T b) const { return a > b ? a : b; }
};
template <class T>
struct AndF {
  T operator()(T a, T b) const { return static_cast<T>(a & b); }
};
template <class T>
struct OrF {
  T operator()(T a, T b) const { return static_cast<T>(a | b); }
};
template <class T>
struct XorF {
  T operator()(T a, T b) const { return static_cast<T>(a ^ b); }
};
template <class T>
struct NotF {
  T operator()(T a) const { return static_cast<T>(~a); }
};
template <class T>
struct CnotF {
  T operator()(T a) const { return a == 0 ? 1 : 0; }
};
template <class T>
struct NegF {
  T operator()(T a) const { return static_cast<T>(Wide<T>(0) - Wide<T>(a)); }
};
template <class T>
struct AbsF {
  T operator()(T a) const { return a < 0 ? static_cast<T>(Wide<T>(0) - Wide<T>(a)) : a; }
};
template <class T>
struct BrevF {
  T operator()(T a) const {
    using U = std::make_unsigned_t<T>;
    U x = static_cast<U>(a), r = 0;
    for (int i = 0; i < Bits<T>(); ++i) {
      r = static_cast<U>((r << 1) | (x & 1));
      x = static_cast<U>(x >> 1);
    }
    return static_cast<T>(r);
  }
};

// Shift amount is a .u32 operand; amounts past the width clamp as PTX specifies.
template <class T, bool kLeft>
bool Shift(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map2<T, T, uint32_t>(w, in, m, [](T a, uint32_t s) -> T {
    using U = std::make_unsigned_t<T>;
    if (s >= static_cast<uint32_t>(Bits<T>())) {
      if constexpr (kLeft || !std::is_signed_v<T>) {
        return 0;
      } else {
        return a < 0 ? static_cast<T>(-1) : 0;
      }
    }
    if constexpr (kLeft) {
      return static_cast<T>(static_cast<U>(static_cast<U>(a) << s));
    } else {
      return static_cast<T>(a >> s);
    }
  });
  return true;
}

template <class T>
bool Popc(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  using U = std::make_unsigned_t<T>;
  Map1<uint32_t, U>(w, in, m, [](U a) { return static_cast<uint32_t>(std::popcount(a)); });
  return true;
}
template <class T>
bool Clz(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  using U = std::make_unsigned_t<T>;
  Map1<uint32_t, U>(w, in, m, [](U a) { return static_cast<uint32_t>(std::countl_zero(a)); });
  return true;
}

template <class T, class TW>
bool MulWide(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map2<TW, T, T>(w, in, m, [](T a, T b) { return static_cast<TW>(static_cast<TW>(a) * b); });
  return true;
}
template <class T>
bool MadLo(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map3<T, T, T, T>(
      w, in, m, [](T a, T b, T c) { return static_cast<T>(Wide<T>(a) * Wide<T>(b) + Wide<T>(c)); });
  return true;
}
template <class T>
bool MadHi(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map3<T, T, T, T>(w, in, m,
                   [](T a, T b, T c) { return static_cast<T>(Wide<T>(MulHi(a, b)) + Wide<T>(c)); });
  return true;
}
template <class T, class TW>
bool MadWide(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map3<TW, T, T, TW>(w, in, m, [](T a, T b, TW c) {
    using U = std::make_unsigned_t<TW>;
    return static_cast<TW>(static_cast<U>(static_cast<TW>(a) * b) + static_cast<U>(c));
  });
  return true;
}

template <class T>
bool Bfe(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map3<T, T, uint32_t, uint32_t>(w, in, m, [](T a, uint32_t b, uint32_t c) -> T {
    using U = std::make_unsigned_t<T>;
    const uint32_t pos = b & 0xff, len = c & 0xff, msb = Bits<T>() - 1;
    const U x = static_cast<U>(a);
    U sbit = 0;
    if (std::is_signed_v<T> && len != 0) sbit = (x >> std::min(pos + len - 1, msb)) & 1;
    U r = 0;
    for (uint32_t i = 0; i <= msb; ++i) {
      const U bit = (i < len && pos + i <= msb) ? ((x >> (pos + i)) & 1) : sbit;
      r = static_cast<U>(r | (bit << i));
    }
    return static_cast<T>(r);
  });
  return true;
}

template <class T>
bool Bfi(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t *f = w.R(in.s[0]), *b = w.R(in.s[1]), *c = w.R(in.s[2]), *e = w.R(in.s[3]);
  ForLanes(m, [&](uint32_t l) {
    const uint32_t pos = Get<uint32_t>(c[l]) & 0xff, len = Get<uint32_t>(e[l]) & 0xff;
    T r = Get<T>(b[l]);
    const T fv = Get<T>(f[l]);
    for (uint32_t i = 0; i < len && pos + i < static_cast<uint32_t>(Bits<T>()); ++i) {
      const T bit = static_cast<T>(T{1} << (pos + i));
      r = ((fv >> i) & 1) ? static_cast<T>(r | bit) : static_cast<T>(r & ~bit);
    }
    d[l] = Put<T>(r);
  });
  w.init[in.d[0]] |= m;
  return true;
}

bool Prmt(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map3<uint32_t, uint32_t, uint32_t, uint32_t>(w, in, m, [](uint32_t a, uint32_t b, uint32_t c) {
    const uint64_t src = (uint64_t{b} << 32) | a;
    uint32_t r = 0;
    for (int n = 0; n < 4; ++n) {
      const uint32_t sel = (c >> (4 * n)) & 0xf;
      uint32_t byte = (src >> (8 * (sel & 7))) & 0xff;
      if (sel & 8) byte = (byte & 0x80) ? 0xff : 0;
      r |= byte << (8 * n);
    }
    return r;
  });
  return true;
}

bool MovRaw(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.s[0]);
  ForLanes(m, [&](uint32_t l) { d[l] = a[l]; });
  w.init[in.d[0]] |= m;
  return true;
}

bool Selp(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t *a = w.R(in.s[0]), *b = w.R(in.s[1]);
  const uint32_t p = in.ps_neg[0] ? ~w.preds[in.ps[0]] : w.preds[in.ps[0]];
  ForLanes(m, [&](uint32_t l) { d[l] = ((p >> l) & 1) ? a[l] : b[l]; });
  w.init[in.d[0]] |= m;
  return true;
}

template <class T>
Handler IntBinary(Op op, Width width, bool sat) {
  constexpr bool kSigned = std::is_signed_v<T>;
  switch (op) {
    case Op::kAdd:
      if (sat) {
        if constexpr (std::is_same_v<T, int32_t>) return &Bin<T, AddSatS32>;
        return nullptr;
      }
      return &Bin<T, AddF<T>>;
    case Op::kSub:
      if (sat) {
        if constexpr (std::is_same_v<T, int32_t>) return &Bin<T, SubSatS32>;
        return nullptr;
      }
      return &Bin<T, SubF<T>>;
    case Op::kMul:
      if (width == Width::kLo) return &Bin<T, MulLoF<T>>;
      if (width == Width::kHi) return &Bin<T, MulHiF<T>>;
      if (width == Width::kWide) {
        if constexpr (sizeof(T) == 2) {
          return &MulWide<T, std::conditional_t<kSigned, int32_t, uint32_t>>;
        } else if constexpr (sizeof(T) == 4) {
          return &MulWide<T, std::conditional_t<kSigned, int64_t, uint64_t>>;
        }
      }
      return nullptr;
    case Op::kMad:
      if (width == Width::kLo) return &MadLo<T>;
      if (width == Width::kHi) return &MadHi<T>;
      if (width == Width::kWide) {
        if constexpr (sizeof(T) == 2) {
          return &MadWide<T, std::conditional_t<kSigned, int32_t, uint32_t>>;
        } else if constexpr (sizeof(T) == 4) {
          return &MadWide<T, std::conditional_t<kSigned, int64_t, uint64_t>>;
        }
      }
      return nullptr;
    case Op::kDiv:
      return &Bin<T, DivF<T>>;
    case Op::kRem:
      return &Bin<T, RemF<T>>;
    case Op::kMin:
      return &Bin<T, MinF<T>>;
    case Op::kMax:
      return &Bin<T, MaxF<T>>;
    case Op::kAnd:
      return &Bin<T, AndF<T>>;
    case Op::kOr:
      return &Bin<T, OrF<T>>;
    case Op::kXor:
      return &Bin<T, XorF<T>>;
    case Op::kNot:
      return &Un<T, NotF<T>>;
    case Op::kCnot:
      return &Un<T, CnotF<T>>;
    case Op::kNeg:
      return &Un<T, NegF<T>>;
    case Op::kAbs:
      if constexpr (kSigned) return &Un<T, AbsF<T>>;
      return nullptr;
    case Op::kShl:
      return &Shift<T, true>;
    case Op::kShr:
      return &Shift<T, false>;
    case Op::kPopc:
      return &Popc<T>;
    case Op::kClz:
      return &Clz<T>;
    case Op::kBrev:
      return &Un<T, BrevF<T>>;
    case Op::kBfe:
      return &Bfe<T>;
    case Op::kBfi:
      return &Bfi<T>;
    default:
      return nullptr;
  }
}

// bfind: position of the most significant non-sign bit, 0xffffffff when there is none;
// .shiftamt returns the left shift that would normalise it instead.
template <class T, bool kShiftAmt>
bool Bfind(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map1<uint32_t, T>(w, in, m, [](T a) -> uint32_t {
    using U = std::make_unsigned_t<T>;
    U x = static_cast<U>(a);
    if (std::is_signed_v<T> && a < 0) x = static_cast<U>(~x);
    if (x == 0) return 0xffffffffu;
    const uint32_t pos = static_cast<uint32_t>(Bits<T>() - 1 - std::countl_zero(x));
    return kShiftAmt ? static_cast<uint32_t>(Bits<T>() - 1) - pos : pos;
  });
  return true;
}

// shf: funnel shift of the 64-bit pair b:a (b high); .clamp caps the amount at 32,
// .wrap takes it mod 32.
template <bool kLeft, bool kClamp>
bool Shf(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map3<uint32_t, uint32_t, uint32_t, uint32_t>(w, in, m, [](uint32_t a, uint32_t b, uint32_t c) {
    const uint32_t n = kClamp ? std::min(c, 32u) : (c & 31);
    const uint64_t pair = (uint64_t{b} << 32) | a;
    return kLeft ? static_cast<uint32_t>((pair << n) >> 32) : static_cast<uint32_t>(pair >> n);
  });
  return true;
}

}  // namespace

Handler SelectBfind(Ty t, bool shiftamt) {
  switch (t) {
    case Ty::kU32:
      return shiftamt ? &Bfind<uint32_t, true> : &Bfind<uint32_t, false>;
    case Ty::kS32:
      return shiftamt ? &Bfind<int32_t, true> : &Bfind<int32_t, false>;
    case Ty::kU64:
      return shiftamt ? &Bfind<uint64_t, true> : &Bfind<uint64_t, false>;
    case Ty::kS64:
      return shiftamt ? &Bfind<int64_t, true> : &Bfind<int64_t, false>;
    default:
      return nullptr;
  }
}

Handler SelectShf(bool left, bool clamp) {
  if (left) return clamp ? &Shf<true, true> : &Shf<true, false>;
  return clamp ? &Shf<false, true> : &Shf<false, false>;
}

Handler SelectIntOp(const OpSel& s) {
  if (s.op == Op::kMov) return &MovRaw;
  if (s.op == Op::kSelp) return &Selp;
  if (s.op == Op::kPrmt) return s.type == Ty::kB32 ? &Prmt : nullptr;
  switch (s.type) {
    case Ty::kU16:
    case Ty::kB16:
      return IntBinary<uint16_t>(s.op, s.width, s.sat);
    case Ty::kS16:
      return IntBinary<int16_t>(s.op, s.width, s.sat);
    case Ty::kU32:
    case Ty::kB32:
      return IntBinary<uint32_t>(s.op, s.width, s.sat);
    case Ty::kS32:
      return IntBinary<int32_t>(s.op, s.width, s.sat);
    case Ty::kU64:
    case Ty::kB64:
      return IntBinary<uint64_t>(s.op, s.width, s.sat);
    case Ty::kS64:
      return IntBinary<int64_t>(s.op, s.width, s.sat);
    default:
      return nullptr;
  }
}

}  // namespace ptxserve::emu
