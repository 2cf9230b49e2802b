// atom / red handlers. Global atomics use host atomics (blocks may run on several host
// threads); lanes of a warp apply their operations in lane order.
#include <cstring>
#include <type_traits>

#include "kernels/emu/mem_access.h"
#include "kernels/emu/ops.h"

namespace ptxserve::emu {
namespace {

template <class T>
using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

// Read-modify-write with compare-and-swap on the raw bits.
template <class T, class F>
T CasLoop(uint8_t* p, F f) {
  using B = Bits<T>;
  B* q = reinterpret_cast<B*>(p);
  B old = __atomic_load_n(q, __ATOMIC_RELAXED);
  while (true) {
    T o;
    std::memcpy(&o, &old, sizeof(T));
    const T n = f(o);
    B nb;
    std::memcpy(&nb, &n, sizeof(T));
    if (__atomic_compare_exchange_n(q, &old, nb, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      return o;
    }
  }
}

template <AtomOp OP, class T>
T DoAtomic(uint8_t* p, T b, T c) {
  if constexpr (OP == AtomOp::kAdd && std::is_integral_v<T>) {
    return __atomic_fetch_add(reinterpret_cast<T*>(p), b, __ATOMIC_RELAXED);
  } else if constexpr (OP == AtomOp::kAdd) {
    return CasLoop<T>(p, [b](T o) { return o + b; });
  } else if constexpr (OP == AtomOp::kMin) {
    return CasLoop<T>(p, [b](T o) { return b < o ? b : o; });
  } else if constexpr (OP == AtomOp::kMax) {
    return CasLoop<T>(p, [b](T o) { return b > o ? b : o; });
  } else if constexpr (OP == AtomOp::kExch) {
    return __atomic_exchange_n(reinterpret_cast<T*>(p), b, __ATOMIC_RELAXED);
  } else if constexpr (OP == AtomOp::kCas) {
    T expected = b;
    __atomic_compare_exchange_n(reinterpret_cast<T*>(p), &expected, c, false, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
    return expected;
  } else if constexpr (OP == AtomOp::kInc) {
    return CasLoop<T>(p, [b](T o) { return o >= b ? T(0) : T(o + 1); });
  } else if constexpr (OP == AtomOp::kDec) {
    return CasLoop<T>(p, [b](T o) { return (o == 0 || o > b) ? b : T(o - 1); });
  } else if constexpr (OP == AtomOp::kAnd) {
    return __atomic_fetch_and(reinterpret_cast<T*>(p), b, __ATOMIC_RELAXED);
  } else if constexpr (OP == AtomOp::kOr) {
    return __atomic_fetch_or(reinterpret_cast<T*>(p), b, __ATOMIC_RELAXED);
  } else {
    static_assert(OP == AtomOp::kXor);
    return __atomic_fetch_xor(reinterpret_cast<T*>(p), b, __ATOMIC_RELAXED);
  }
}

template <Space SP, AtomOp OP, class T, bool kRet>
bool Atom(ExecCtx& ctx, Warp& w, const Instr& in, uint32_t m) {
  const uint64_t* base = in.addr_is_reg ? w.R(in.addr_slot) : nullptr;
  const Allocation* cache = nullptr;
  const uint64_t* b = w.R(in.s[0]);
  const uint64_t* c = w.R(in.s[1]);
  uint64_t* d = kRet ? w.R(in.d[0]) : nullptr;
  bool ok = true;
  ForLanes(m, [&](uint32_t l) {
    if (!ok) return;
    const uint64_t addr = LaneAddr(in, base, l);
    uint8_t* p = Resolve<SP>(ctx, addr, sizeof(T), sizeof(T), cache, l, "atomic");
    if (p == nullptr) {
      ok = false;
      return;
    }
    // Atomics may race with each other by design; they count as writes for later reads.
    if (!TrackAccess<SP>(ctx, p, addr, sizeof(T), Access::kStrongWrite, in.line, l) ||
        !TrackDependent<SP>(ctx, w, addr, sizeof(T), true, l)) {
      ok = false;
      return;
    }
    const T old = DoAtomic<OP, T>(p, Get<T>(b[l]), OP == AtomOp::kCas ? Get<T>(c[l]) : T{});
    if constexpr (kRet) d[l] = Put<T>(old);
  });
  if (!ok) return false;
  if constexpr (kRet) w.init[in.d[0]] |= m;
  return true;
}

template <Space SP, AtomOp OP, bool kRet>
Handler AtomType(Ty t) {
  constexpr bool kArith = OP == AtomOp::kAdd || OP == AtomOp::kMin || OP == AtomOp::kMax;
  constexpr bool kBitwise = OP == AtomOp::kAnd || OP == AtomOp::kOr || OP == AtomOp::kXor ||
                            OP == AtomOp::kExch || OP == AtomOp::kCas;
  switch (t) {
    case Ty::kU32:
      if constexpr (kArith || kBitwise || OP == AtomOp::kInc || OP == AtomOp::kDec) {
        return &Atom<SP, OP, uint32_t, kRet>;
      }
      return nullptr;
    case Ty::kS32:
      if constexpr (kArith || OP == AtomOp::kExch || OP == AtomOp::kCas) {
        return &Atom<SP, OP, int32_t, kRet>;
      }
      return nullptr;
    case Ty::kU64:
      if constexpr (kArith || kBitwise) return &Atom<SP, OP, uint64_t, kRet>;
      return nullptr;
    case Ty::kS64:
      if constexpr (OP == AtomOp::kMin || OP == AtomOp::kMax) return &Atom<SP, OP, int64_t, kRet>;
      return nullptr;
    case Ty::kB32:
      if constexpr (kBitwise) return &Atom<SP, OP, uint32_t, kRet>;
      return nullptr;
    case Ty::kB64:
      if constexpr (kBitwise) return &Atom<SP, OP, uint64_t, kRet>;
      return nullptr;
    case Ty::kF32:
      if constexpr (OP == AtomOp::kAdd) return &Atom<SP, OP, float, kRet>;
      return nullptr;
    case Ty::kF64:
      if constexpr (OP == AtomOp::kAdd) return &Atom<SP, OP, double, kRet>;
      return nullptr;
    default:
      return nullptr;
  }
}

template <Space SP, bool kRet>
Handler AtomFor(AtomOp op, Ty t) {
  switch (op) {
    case AtomOp::kAdd:
      return AtomType<SP, AtomOp::kAdd, kRet>(t);
    case AtomOp::kMin:
      return AtomType<SP, AtomOp::kMin, kRet>(t);
    case AtomOp::kMax:
      return AtomType<SP, AtomOp::kMax, kRet>(t);
    case AtomOp::kExch:
      return AtomType<SP, AtomOp::kExch, kRet>(t);
    case AtomOp::kCas:
      return AtomType<SP, AtomOp::kCas, kRet>(t);
    case AtomOp::kInc:
      return AtomType<SP, AtomOp::kInc, kRet>(t);
    case AtomOp::kDec:
      return AtomType<SP, AtomOp::kDec, kRet>(t);
    case AtomOp::kAnd:
      return AtomType<SP, AtomOp::kAnd, kRet>(t);
    case AtomOp::kOr:
      return AtomType<SP, AtomOp::kOr, kRet>(t);
    case AtomOp::kXor:
      return AtomType<SP, AtomOp::kXor, kRet>(t);
    case AtomOp::kNone:
      return nullptr;
  }
  return nullptr;
}

}  // namespace

Handler SelectAtom(Space sp, AtomOp op, Ty t, bool returns) {
  switch (sp) {
    case Space::kGlobal:
      return returns ? AtomFor<Space::kGlobal, true>(op, t) : AtomFor<Space::kGlobal, false>(op, t);
    case Space::kShared:
      return returns ? AtomFor<Space::kShared, true>(op, t) : AtomFor<Space::kShared, false>(op, t);
    case Space::kGeneric:
      return returns ? AtomFor<Space::kGeneric, true>(op, t)
                     : AtomFor<Space::kGeneric, false>(op, t);
    default:
      return nullptr;
  }
}

}  // namespace ptxserve::emu
