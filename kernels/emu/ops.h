// Internal to the emulator: opcodes, decode-time handler selection, and the lane-loop
// helpers the handler files (ops_*.cc) share.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "kernels/emu/fp16.h"
#include "kernels/emu/ir.h"

namespace ptxserve::emu {

// clang-format off
#define EMU_OPCODES(X) \
  X(Add, "add") X(Sub, "sub") X(Mul, "mul") X(Mad, "mad") X(Fma, "fma") X(Div, "div") \
  X(Rem, "rem") X(Neg, "neg") X(Abs, "abs") X(Min, "min") X(Max, "max") X(And, "and") \
  X(Or, "or") X(Xor, "xor") X(Not, "not") X(Cnot, "cnot") X(Shl, "shl") X(Shr, "shr") \
  X(Popc, "popc") X(Clz, "clz") X(Brev, "brev") X(Bfe, "bfe") X(Bfi, "bfi") \
  X(Prmt, "prmt") X(Selp, "selp") X(Setp, "setp") X(Mov, "mov") X(Cvt, "cvt") \
  X(Cvta, "cvta") X(Ld, "ld") X(Ldu, "ldu") X(St, "st") X(Atom, "atom") X(Red, "red") \
  X(Cp, "cp") X(Rcp, "rcp") X(Sqrt, "sqrt") X(Rsqrt, "rsqrt") X(Ex2, "ex2") \
  X(Lg2, "lg2") X(Sin, "sin") X(Cos, "cos") X(Tanh, "tanh") X(Copysign, "copysign") \
  X(Shfl, "shfl") X(Vote, "vote") X(Activemask, "activemask") X(Redux, "redux") \
  X(Bar, "bar") X(Barrier, "barrier") X(Membar, "membar") X(Fence, "fence") \
  X(Bra, "bra") X(Ret, "ret") X(Exit, "exit") X(Prefetch, "prefetch") \
  X(Prefetchu, "prefetchu") X(Nanosleep, "nanosleep") X(Testp, "testp") \
  X(Griddepcontrol, "griddepcontrol") X(Bfind, "bfind") X(Shf, "shf") \
  X(Ldmatrix, "ldmatrix") X(Mma, "mma")
// clang-format on

enum class Op : uint16_t {
#define EMU_OP_ENUM(name, text) k##name,
  EMU_OPCODES(EMU_OP_ENUM)
#undef EMU_OP_ENUM
      kCount
};
const char* OpName(Op op);
bool ParseOpName(const std::string& s, Op* op);

enum class Width : uint8_t { kNone, kLo, kHi, kWide };
enum class Round : uint8_t { kNone, kRn, kRz, kRm, kRp, kRni, kRzi, kRmi, kRpi };
enum class Cmp : uint8_t {
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kLo,
  kLs,
  kHi,
  kHs,  // ordered / integer
  kEqu,
  kNeu,
  kLtu,
  kLeu,
  kGtu,
  kGeu,
  kNum,
  kNan,  // unordered (float)
};
enum class BoolOp : uint8_t { kNone, kAnd, kOr, kXor };
enum class AtomOp : uint8_t { kNone, kAdd, kMin, kMax, kExch, kCas, kInc, kDec, kAnd, kOr, kXor };
enum class ShflMode : uint8_t { kUp, kDown, kBfly, kIdx };
enum class VoteMode : uint8_t { kAll, kAny, kUni, kBallot };

// What decode knows about an instruction when it picks a handler.
struct OpSel {
  Op op = Op::kCount;
  Ty type = Ty::kNone;   // instruction type (cvt: destination)
  Ty type2 = Ty::kNone;  // cvt: source type
  Width width = Width::kNone;
  Round rnd = Round::kNone;
  bool ftz = false, sat = false, approx = false, full = false;
  AtomOp atom = AtomOp::kNone;
};

// Each returns nullptr when the combination is unsupported (decode reports it).
Handler SelectIntOp(const OpSel& s);    // integer/bit ALU ops, selp/mov/setp on any type
Handler SelectFloatOp(const OpSel& s);  // f32/f64 arithmetic and special functions
Handler SelectHalfOp(const OpSel& s);   // f16/bf16 (scalar and x2) arithmetic
Handler SelectCvt(const OpSel& s);      // cvt (rounding/sat/ftz from s)
Handler SelectSetp(Ty t);               // setp for any comparable type (cmp in Instr::mode)
Handler SelectLoad(Space sp, int size, bool is_signed, int vec);
Handler SelectStore(Space sp, int size, int vec);
Handler SelectAtom(Space sp, AtomOp op, Ty t, bool returns);
Handler SelectCpAsync();  // these three need ExecCtx::async (Function::uses_cp_async)
Handler SelectCpAsyncCommit();
Handler SelectCpAsyncWait(bool all);  // wait_group (N in Instr::imm) or wait_all
Handler SelectMovPack(bool pack);     // mov.bN {a,b..} <-> d; element size in Instr::size
Handler SelectCvta(bool to_space, bool local, bool addr32);  // shared/local <-> generic
Handler SelectShfl(ShflMode m);
Handler SelectVote(VoteMode m);
Handler SelectActiveMask();
Handler SelectRedux(AtomOp op, Ty t);
Handler SelectClock(bool is64);
Handler SelectWarpSync();
Handler SelectNop();
Handler SelectGridWait();          // griddepcontrol.wait (dependent_launch.h)
Handler SelectLaunchDependents();  // griddepcontrol.launch_dependents
Handler SelectFence();             // membar / fence: a host memory fence
Handler SelectPredLogic(Op op);    // and/or/xor/not/mov on .pred
Handler SelectBfind(Ty t, bool shiftamt);
Handler SelectShf(bool left, bool clamp);
// ldmatrix.sync.aligned.m8n8.x<num>[.trans] from .shared (or a generic address into it).
Handler SelectLdmatrix(int num, bool trans, bool generic);
// mma.sync.aligned.m16n8k<k>.row.col.f32.<ab>.<ab>.f32, ab = f16 or bf16, k = 8 or 16.
Handler SelectMma(int k, bool bf16);

// The message for a read of register `reg` that lanes `missing` of warp `warp` never wrote.
std::string UninitMessage(Op op, std::string_view reg, uint32_t missing, uint32_t warp);
// Why lane `lane` of the current warp may not exit yet (cp.async copies it never waited
// for), or "" when it may.
std::string CopiesInFlightAtExit(const ExecCtx& ctx, uint32_t lane);

template <class T>
inline T Get(uint64_t v) {
  if constexpr (std::is_same_v<T, float>) {
    return BitsToF32(static_cast<uint32_t>(v));
  } else if constexpr (std::is_same_v<T, double>) {
    return BitsToF64(v);
  } else {
    return static_cast<T>(v);
  }
}

template <class T>
inline uint64_t Put(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return F32ToBits(v);
  } else if constexpr (std::is_same_v<T, double>) {
    return F64ToBits(v);
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  } else {
    return static_cast<uint64_t>(v);
  }
}

// d = f(a) per lane.
template <class TD, class TA, class F>
inline void Map1(Warp& w, const Instr& in, uint32_t m, F f) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.s[0]);
  ForLanes(m, [&](uint32_t l) { d[l] = Put<TD>(f(Get<TA>(a[l]))); });
  w.init[in.d[0]] |= m;
}

// d = f(a, b) per lane.
template <class TD, class TA, class TB, class F>
inline void Map2(Warp& w, const Instr& in, uint32_t m, F f) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.s[0]);
  const uint64_t* b = w.R(in.s[1]);
  ForLanes(m, [&](uint32_t l) { d[l] = Put<TD>(f(Get<TA>(a[l]), Get<TB>(b[l]))); });
  w.init[in.d[0]] |= m;
}

// d = f(a, b, c) per lane.
template <class TD, class TA, class TB, class TC, class F>
inline void Map3(Warp& w, const Instr& in, uint32_t m, F f) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.s[0]);
  const uint64_t* b = w.R(in.s[1]);
  const uint64_t* c = w.R(in.s[2]);
  ForLanes(m, [&](uint32_t l) { d[l] = Put<TD>(f(Get<TA>(a[l]), Get<TB>(b[l]), Get<TC>(c[l]))); });
  w.init[in.d[0]] |= m;
}

inline float FlushF32(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}

}  // namespace ptxserve::emu
