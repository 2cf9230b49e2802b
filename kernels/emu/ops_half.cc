// f16 / bf16 arithmetic, scalar and packed x2 (element 0 in the low 16 bits). Sums and
// products are computed in f32 and rounded once to the 16-bit format: f32 carries more
// than 2p+2 bits for both formats, so this double rounding equals a direct correct
// rounding. fma goes through f64 and a round-to-odd step to f32 for the same reason.
#include <algorithm>
#include <cmath>

#include "kernels/emu/ops.h"

namespace ptxserve::emu {
namespace {

// f64 -> f32 rounding to odd: exact when representable, otherwise the truncation with the
// last bit set, so a later round-to-nearest to a narrower format is correctly rounded.
float RoundToOddF32(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || std::isnan(d) || std::isinf(f)) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return BitsToF32(F32ToBits(f) | 1u);
}

template <bool kBF>
struct Fmt {
  static float ToF(uint32_t h) {
    if constexpr (kBF) {
      return BF16ToF32(static_cast<uint16_t>(h));
    } else {
      return HalfToF32(static_cast<uint16_t>(h));
    }
  }
  static uint32_t FromF(float f) {
    if constexpr (kBF) {
      return F32ToBF16(f);
    } else {
      return F32ToHalf(f);
    }
  }
  static bool Subnormal(uint32_t h) {
    return kBF ? ((h & 0x7f80u) == 0 && (h & 0x7fu) != 0)
               : ((h & 0x7c00u) == 0 && (h & 0x3ffu) != 0);
  }
  static uint32_t Flush(uint32_t h) { return Subnormal(h) ? (h & 0x8000u) : h; }
};

template <bool kBF, bool kFtz, bool kSat>
inline uint32_t Finish(float r) {
  uint32_t h = Fmt<kBF>::FromF(kSat ? (std::isnan(r) ? 0.0f : std::clamp(r, 0.0f, 1.0f)) : r);
  if constexpr (kFtz) h = Fmt<kBF>::Flush(h);
  return h;
}
template <bool kBF, bool kFtz>
inline float Load(uint32_t v, int e) {
  uint32_t h = (v >> (16 * e)) & 0xffffu;
  if constexpr (kFtz) h = Fmt<kBF>::Flush(h);
  return Fmt<kBF>::ToF(h);
}

struct AddF {
  float operator()(float a, float b) const { return a + b; }
};
struct SubF {
  float operator()(float a, float b) const { return a - b; }
};
struct MulF {
  float operator()(float a, float b) const { return a * b; }
};
struct MinF {
  float operator()(float a, float b) const {
    if (a == b) return std::signbit(a) ? a : b;
    return std::fmin(a, b);
  }
};
struct MaxF {
  float operator()(float a, float b) const {
    if (a == b) return std::signbit(a) ? b : a;
    return std::fmax(a, b);
  }
};

template <bool kBF, int kN, class F, bool kFtz, bool kSat>
bool HBin(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map2<uint32_t, uint32_t, uint32_t>(w, in, m, [](uint32_t a, uint32_t b) {
    uint32_t r = 0;
    for (int e = 0; e < kN; ++e) {
      const float x = Load<kBF, kFtz>(a, e), y = Load<kBF, kFtz>(b, e);
      r |= Finish<kBF, kFtz, kSat>(F{}(x, y)) << (16 * e);
    }
    return r;
  });
  return true;
}

template <bool kBF, int kN, bool kFtz, bool kSat>
bool HFma(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map3<uint32_t, uint32_t, uint32_t, uint32_t>(w, in, m, [](uint32_t a, uint32_t b, uint32_t c) {
    uint32_t r = 0;
    for (int e = 0; e < kN; ++e) {
      const double x = Load<kBF, kFtz>(a, e), y = Load<kBF, kFtz>(b, e), z = Load<kBF, kFtz>(c, e);
      r |= Finish<kBF, kFtz, kSat>(RoundToOddF32(x * y + z)) << (16 * e);
    }
    return r;
  });
  return true;
}

// ex2.approx / tanh.approx on 16-bit floats: evaluated in f32 and rounded once.
struct Ex2F {
  float operator()(float a) const { return std::exp2(a); }
};
struct TanhF {
  float operator()(float a) const { return std::tanh(a); }
};
template <bool kBF, int kN, class F, bool kFtz>
bool HUn(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map1<uint32_t, uint32_t>(w, in, m, [](uint32_t a) {
    uint32_t r = 0;
    for (int e = 0; e < kN; ++e) {
      r |= Finish<kBF, kFtz, false>(F{}(Load<kBF, kFtz>(a, e))) << (16 * e);
    }
    return r;
  });
  return true;
}

// neg/abs are sign-bit operations (NaN payloads pass through, as on the hardware).
template <int kN, bool kAbs>
bool HSign(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  Map1<uint32_t, uint32_t>(w, in, m, [](uint32_t a) {
    const uint32_t sign = kN == 2 ? 0x80008000u : 0x8000u;
    return kAbs ? (a & ~sign) : (a ^ sign);
  });
  return true;
}

template <bool kBF, int kN, bool kFtz, bool kSat>
Handler Pick(Op op) {
  switch (op) {
    case Op::kAdd:
      return &HBin<kBF, kN, AddF, kFtz, kSat>;
    case Op::kSub:
      return &HBin<kBF, kN, SubF, kFtz, kSat>;
    case Op::kMul:
      return &HBin<kBF, kN, MulF, kFtz, kSat>;
    case Op::kMin:
      return kSat ? nullptr : &HBin<kBF, kN, MinF, kFtz, false>;
    case Op::kMax:
      return kSat ? nullptr : &HBin<kBF, kN, MaxF, kFtz, false>;
    case Op::kFma:
      return &HFma<kBF, kN, kFtz, kSat>;
    case Op::kEx2:
      return kSat ? nullptr : &HUn<kBF, kN, Ex2F, kFtz>;
    case Op::kTanh:
      return kSat ? nullptr : &HUn<kBF, kN, TanhF, kFtz>;
    case Op::kNeg:
      return &HSign<kN, false>;
    case Op::kAbs:
      return &HSign<kN, true>;
    default:
      return nullptr;
  }
}

template <bool kBF, int kN>
Handler PickMods(const OpSel& s) {
  if (s.ftz) return s.sat ? Pick<kBF, kN, true, true>(s.op) : Pick<kBF, kN, true, false>(s.op);
  return s.sat ? Pick<kBF, kN, false, true>(s.op) : Pick<kBF, kN, false, false>(s.op);
}

}  // namespace

Handler SelectHalfOp(const OpSel& s) {
  if (s.rnd != Round::kNone && s.rnd != Round::kRn) return nullptr;
  switch (s.type) {
    case Ty::kF16:
      return PickMods<false, 1>(s);
    case Ty::kF16x2:
      return PickMods<false, 2>(s);
    case Ty::kBF16:  // bf16 has no subnormal flushing except ex2.approx.ftz.bf16
      return s.sat || (s.ftz && s.op != Op::kEx2) ? nullptr : PickMods<true, 1>(s);
    case Ty::kBF16x2:
      return s.sat || (s.ftz && s.op != Op::kEx2) ? nullptr : PickMods<true, 2>(s);
    default:
      return nullptr;
  }
}

}  // namespace ptxserve::emu
