// cvt between every pair of integer and floating types, cvt.rn.{f16,bf16}x2.f32, mov
// packing/unpacking and cvta between generic and shared addresses. Conversions start from
// the exact source value (long double holds every 64-bit integer and f64 exactly), round
// once to nearest, and step by one unit for the directed modes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/emu/ops.h"

namespace ptxserve::emu {
namespace {

using LD = long double;

constexpr bool IsIntTy(Ty t) {
  return t == Ty::kU8 || t == Ty::kU16 || t == Ty::kU32 || t == Ty::kU64 || t == Ty::kS8 ||
         t == Ty::kS16 || t == Ty::kS32 || t == Ty::kS64 || t == Ty::kB8 || t == Ty::kB16 ||
         t == Ty::kB32 || t == Ty::kB64;
}
constexpr bool IsSignedTy(Ty t) {
  return t == Ty::kS8 || t == Ty::kS16 || t == Ty::kS32 || t == Ty::kS64;
}
constexpr int BitsOf(Ty t) {
  switch (t) {
    case Ty::kU8:
    case Ty::kS8:
    case Ty::kB8:
      return 8;
    case Ty::kU16:
    case Ty::kS16:
    case Ty::kB16:
    case Ty::kF16:
    case Ty::kBF16:
      return 16;
    case Ty::kU32:
    case Ty::kS32:
    case Ty::kB32:
    case Ty::kF32:
      return 32;
    default:
      return 64;
  }
}

// Source integer as a signed 128-bit value.
template <Ty S>
__int128 ReadInt(uint64_t v) {
  constexpr int kBits = BitsOf(S);
  if constexpr (kBits == 64) {
    return IsSignedTy(S) ? __int128{static_cast<int64_t>(v)} : __int128{v};
  } else {
    const uint64_t mask = (uint64_t{1} << kBits) - 1;
    const uint64_t x = v & mask;
    if (IsSignedTy(S) && (x >> (kBits - 1)) != 0)
      return static_cast<__int128>(x) - (__int128{1} << kBits);
    return x;
  }
}
template <Ty D>
__int128 IntMin() {
  return IsSignedTy(D) ? -(__int128{1} << (BitsOf(D) - 1)) : 0;
}
template <Ty D>
__int128 IntMax() {
  return IsSignedTy(D) ? (__int128{1} << (BitsOf(D) - 1)) - 1 : (__int128{1} << BitsOf(D)) - 1;
}
// Stores an integer result: the low bits, extended per the destination's signedness.
template <Ty D>
uint64_t WriteInt(__int128 v) {
  constexpr int kBits = BitsOf(D);
  uint64_t x = static_cast<uint64_t>(v);
  if constexpr (kBits < 64) {
    x &= (uint64_t{1} << kBits) - 1;
    if (IsSignedTy(D) && (x >> (kBits - 1)) != 0) x |= ~((uint64_t{1} << kBits) - 1);
  }
  return x;
}

template <Ty S>
LD ReadFloat(uint64_t v, bool ftz) {
  if constexpr (S == Ty::kF16) return HalfToF32(static_cast<uint16_t>(v));
  if constexpr (S == Ty::kBF16) return BF16ToF32(static_cast<uint16_t>(v));
  if constexpr (S == Ty::kF32) {
    float f = BitsToF32(static_cast<uint32_t>(v));
    return ftz ? FlushF32(f) : f;
  }
  if constexpr (S == Ty::kF64) return BitsToF64(v);
  return 0;
}

float RoundToOddF32(LD x) {
  float f = static_cast<float>(x);
  if (static_cast<LD>(f) == x || std::isnan(x) || std::isinf(f)) return f;
  if (std::fabs(static_cast<LD>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  return BitsToF32(F32ToBits(f) | 1u);
}

// Value of a 16-bit pattern, and the adjacent pattern up (toward +inf) or down.
template <bool kBF>
LD HalfValue(uint32_t h) {
  return kBF ? BF16ToF32(static_cast<uint16_t>(h)) : HalfToF32(static_cast<uint16_t>(h));
}
uint32_t StepHalf(uint32_t h, bool up) {
  const bool neg = (h & 0x8000u) != 0;
  if ((h & 0x7fffu) == 0) return up ? 0x0001u : 0x8001u;
  return (up != neg) ? h + 1 : h - 1;
}

template <Ty D>
uint64_t RoundFloat(LD x, Round rnd) {
  if constexpr (D == Ty::kF64 || D == Ty::kF32) {
    using T = std::conditional_t<D == Ty::kF64, double, float>;
    T r = static_cast<T>(x);
    if (!std::isnan(x)) {
      const LD v = r;
      if ((rnd == Round::kRz && std::fabs(v) > std::fabs(x)) || (rnd == Round::kRm && v > x)) {
        r = std::nextafter(r, rnd == Round::kRz ? T(0) : -std::numeric_limits<T>::infinity());
      } else if (rnd == Round::kRp && v < x) {
        r = std::nextafter(r, std::numeric_limits<T>::infinity());
      } else if (rnd == Round::kRz && std::isinf(r) && !std::isinf(x)) {
        r = std::nextafter(r, T(0));
      }
    }
    return Put<T>(r);
  } else {
    constexpr bool kBF = D == Ty::kBF16;
    const float f = RoundToOddF32(x);
    uint32_t h = kBF ? F32ToBF16(f) : F32ToHalf(f);
    if (!std::isnan(x)) {
      const LD v = HalfValue<kBF>(h);
      if ((rnd == Round::kRz && std::fabs(v) > std::fabs(x)) || (rnd == Round::kRm && v > x)) {
        h = rnd == Round::kRz ? h - 1 : StepHalf(h, false);
      } else if (rnd == Round::kRp && v < x) {
        h = StepHalf(h, true);
      }
    }
    return h & 0xffffu;
  }
}

LD RoundIntegral(LD x, Round rnd) {
  switch (rnd) {
    case Round::kRni:
      return std::nearbyint(x);  // default mode: to nearest even
    case Round::kRzi:
      return std::trunc(x);
    case Round::kRmi:
      return std::floor(x);
    case Round::kRpi:
      return std::ceil(x);
    default:
      return x;
  }
}

template <Ty D, Ty S>
uint64_t Convert(uint64_t v, Round rnd, bool sat, bool ftz) {
  if constexpr (IsIntTy(S) && IsIntTy(D)) {
    __int128 x = ReadInt<S>(v);
    if (sat) x = std::clamp(x, IntMin<D>(), IntMax<D>());
    return WriteInt<D>(x);
  } else if constexpr (!IsIntTy(S) && IsIntTy(D)) {
    LD x = ReadFloat<S>(v, ftz);
    if (std::isnan(x)) return 0;
    x = RoundIntegral(x, rnd);
    if (x <= static_cast<LD>(IntMin<D>())) return WriteInt<D>(IntMin<D>());
    if (x >= static_cast<LD>(IntMax<D>())) return WriteInt<D>(IntMax<D>());
    return WriteInt<D>(static_cast<__int128>(x));
  } else {
    LD x;
    if constexpr (IsIntTy(S)) {
      x = static_cast<LD>(ReadInt<S>(v));
    } else {
      x = RoundIntegral(ReadFloat<S>(v, ftz), rnd);
    }
    if (sat) x = std::isnan(x) ? 0 : std::clamp<LD>(x, 0, 1);
    uint64_t r = RoundFloat<D>(x, rnd);
    if constexpr (D == Ty::kF32) {
      if (ftz) r = F32ToBits(FlushF32(BitsToF32(static_cast<uint32_t>(r))));
    }
    return r;
  }
}

template <Ty D, Ty S>
bool Cvt(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  const Round rnd = static_cast<Round>(in.mode2);
  const bool sat = (in.mode & 1) != 0, ftz = (in.mode & 2) != 0;
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.s[0]);
  ForLanes(m, [&](uint32_t l) { d[l] = Convert<D, S>(a[l], rnd, sat, ftz); });
  w.init[in.d[0]] |= m;
  return true;
}

// Common address arithmetic conversions without rounding or saturation.
template <class TD, class TS>
bool CvtFast(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map1<TD, TS>(w, in, m, [](TS x) { return static_cast<TD>(x); });
  return true;
}

// Hot conversions of generated kernels, without the generic path's long double detour.
template <bool kBF>
bool CvtHalfToF32(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map1<float, uint32_t>(w, in, m, [](uint32_t h) {
    return kBF ? BF16ToF32(static_cast<uint16_t>(h)) : HalfToF32(static_cast<uint16_t>(h));
  });
  return true;
}
template <bool kBF>
bool CvtF32ToHalf(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map1<uint32_t, float>(w, in, m,
                        [](float f) -> uint32_t { return kBF ? F32ToBF16(f) : F32ToHalf(f); });
  return true;
}

template <Ty D>
Handler PickSrc(Ty s) {
  switch (s) {
#define EMU_CVT_CASE(T) \
  case Ty::T:           \
    return &Cvt<D, Ty::T>;
    EMU_CVT_CASE(kU8)
    EMU_CVT_CASE(kU16)
    EMU_CVT_CASE(kU32)
    EMU_CVT_CASE(kU64)
    EMU_CVT_CASE(kS8)
    EMU_CVT_CASE(kS16)
    EMU_CVT_CASE(kS32)
    EMU_CVT_CASE(kS64)
    EMU_CVT_CASE(kF16)
    EMU_CVT_CASE(kBF16)
    EMU_CVT_CASE(kF32)
    EMU_CVT_CASE(kF64)
#undef EMU_CVT_CASE
    default:
      return nullptr;
  }
}

template <bool kBF>
bool CvtPair(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map2<uint32_t, float, float>(w, in, m, [](float hi, float lo) {
    const uint32_t h = kBF ? F32ToBF16(hi) : F32ToHalf(hi);
    const uint32_t l = kBF ? F32ToBF16(lo) : F32ToHalf(lo);
    return (h << 16) | l;
  });
  return true;
}

bool MovPack(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  uint64_t* d = w.R(in.d[0]);
  const int bits = in.size * 8;
  const uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  ForLanes(m, [&](uint32_t l) {
    uint64_t r = 0;
    for (int e = 0; e < in.vec; ++e) r |= (w.R(in.s[e])[l] & mask) << (bits * e);
    d[l] = r;
  });
  w.init[in.d[0]] |= m;
  return true;
}

bool MovUnpack(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  const uint64_t* a = w.R(in.s[0]);
  const int bits = in.size * 8;
  const uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  for (int e = 0; e < in.vec; ++e) {
    uint64_t* d = w.R(in.d[e]);
    ForLanes(m, [&](uint32_t l) { d[l] = (a[l] >> (bits * e)) & mask; });
    w.init[in.d[e]] |= m;
  }
  return true;
}

template <bool kToSpace, bool kLocal, bool kAddr32>
bool CvtaWindow(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.s[0]);
  constexpr uint64_t kWindow = kLocal ? kLocalWindow : kSharedWindow;
  ForLanes(m, [&](uint32_t l) {
    const uint64_t x = kAddr32 ? (a[l] & 0xffffffffu) : a[l];
    uint64_t r = kToSpace ? x - kWindow : x + kWindow;
    if (kAddr32) r &= 0xffffffffu;
    d[l] = r;
  });
  w.init[in.d[0]] |= m;
  return true;
}

}  // namespace

Handler SelectCvt(const OpSel& s) {
  const bool plain = s.rnd == Round::kNone && !s.sat && !s.ftz;
  const bool rn = s.rnd == Round::kRn && !s.sat && !s.ftz;
  if (plain) {
    if (s.type == Ty::kU64 && s.type2 == Ty::kU32) return &CvtFast<uint64_t, uint32_t>;
    if (s.type == Ty::kS64 && s.type2 == Ty::kS32) return &CvtFast<int64_t, int32_t>;
    if (s.type == Ty::kU32 && s.type2 == Ty::kU64) return &CvtFast<uint32_t, uint64_t>;
    if (s.type == Ty::kF32 && s.type2 == Ty::kF16) return &CvtHalfToF32<false>;
    if (s.type == Ty::kF32 && s.type2 == Ty::kBF16) return &CvtHalfToF32<true>;
  }
  if (rn && s.type2 == Ty::kF32) {
    if (s.type == Ty::kF16) return &CvtF32ToHalf<false>;
    if (s.type == Ty::kBF16) return &CvtF32ToHalf<true>;
  }
  if (rn && s.type == Ty::kF32 && s.type2 == Ty::kS32) return &CvtFast<float, int32_t>;
  if (rn && s.type == Ty::kF32 && s.type2 == Ty::kU32) return &CvtFast<float, uint32_t>;
  if ((s.type == Ty::kF16x2 || s.type == Ty::kBF16x2) && s.type2 == Ty::kF32) {
    if (s.rnd != Round::kRn || s.sat || s.ftz) return nullptr;
    return s.type == Ty::kF16x2 ? &CvtPair<false> : &CvtPair<true>;
  }
  switch (s.type) {
#define EMU_CVT_DST(T) \
  case Ty::T:          \
    return PickSrc<Ty::T>(s.type2);
    EMU_CVT_DST(kU8)
    EMU_CVT_DST(kU16)
    EMU_CVT_DST(kU32)
    EMU_CVT_DST(kU64)
    EMU_CVT_DST(kS8)
    EMU_CVT_DST(kS16)
    EMU_CVT_DST(kS32)
    EMU_CVT_DST(kS64)
    EMU_CVT_DST(kF16)
    EMU_CVT_DST(kBF16)
    EMU_CVT_DST(kF32)
    EMU_CVT_DST(kF64)
#undef EMU_CVT_DST
    default:
      return nullptr;
  }
}

Handler SelectMovPack(bool pack) { return pack ? &MovPack : &MovUnpack; }

Handler SelectCvta(bool to_space, bool local, bool addr32) {
  if (local) {
    if (to_space) return addr32 ? &CvtaWindow<true, true, true> : &CvtaWindow<true, true, false>;
    return addr32 ? &CvtaWindow<false, true, true> : &CvtaWindow<false, true, false>;
  }
  if (to_space) return addr32 ? &CvtaWindow<true, false, true> : &CvtaWindow<true, false, false>;
  return addr32 ? &CvtaWindow<false, false, true> : &CvtaWindow<false, false, false>;
}

}  // namespace ptxserve::emu
