// Warp-wide tensor-core instructions: ldmatrix (8x8 matrices of 16-bit elements from shared
// memory into the fragment layout mma expects) and mma.sync m16n8k8 / m16n8k16 with f16 or
// bf16 inputs and f32 accumulators. Both are .sync.aligned: the ISA leaves them undefined
// unless all 32 lanes of a full warp execute them together, so anything less is an error.
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "kernels/emu/mem_access.h"
#include "kernels/emu/ops.h"

namespace ptxserve::emu {
namespace {

bool FailPartialWarp(ExecCtx& ctx, const char* what, uint32_t m) {
  return ctx.Fail(__builtin_ctz(m),
                  absl::StrFormat("%s executed by lanes 0x%08x only: a .sync.aligned instruction "
                                  "must be executed by all 32 lanes of a full warp together (none "
                                  "diverged, predicated off or exited)",
                                  what, m));
}

// Lane l of an ldmatrix reads the row address of row l % 8 of matrix l / 8; lanes past
// the last matrix supply nothing.
template <int kNum, bool kTrans, bool kGeneric>
bool Ldmatrix(ExecCtx& ctx, Warp& w, const Instr& in, uint32_t m) {
  if (m != kFullMask) return FailPartialWarp(ctx, "ldmatrix", m);
  constexpr uint32_t kSuppliers = kNum == 4 ? kFullMask : (1u << (8 * kNum)) - 1;
  const uint64_t* base = nullptr;
  if (in.addr_is_reg) {
    const uint32_t missing = kSuppliers & ~w.init[in.addr_slot];
    if (missing != 0) {
      return ctx.Fail(
          __builtin_ctz(missing),
          UninitMessage(Op::kLdmatrix, (*ctx.slot_names)[in.addr_slot], missing, w.index));
    }
    base = w.R(in.addr_slot);
  }
  uint16_t rows[kNum][8][8];
  const Allocation* none = nullptr;
  for (uint32_t l = 0; l < 8 * kNum; ++l) {
    uint64_t addr = LaneAddr(in, base, l);
    if constexpr (kGeneric) {
      if (addr < kSharedWindow || addr - kSharedWindow >= kSharedWindowSize) {
        return ctx.FailAddr(static_cast<int>(l), addr,
                            absl::StrFormat("ldmatrix: generic address 0x%x is not in shared "
                                            "memory (undefined in the ISA)",
                                            addr));
      }
      addr -= kSharedWindow;
    }
    const uint8_t* p = Resolve<Space::kShared>(ctx, addr, 16, 16, none, l, "ldmatrix row load");
    if (p == nullptr || !TrackShared(ctx, p, 16, Access::kRead, in.line, l)) return false;
    std::memcpy(rows[l / 8][l % 8], p, 16);
  }
  // Lane l holds elements (l / 4, 2 * (l % 4)) and the next column, low half first; .trans
  // reads the matrix column-major, i.e. the transpose of the rows in memory.
  for (int i = 0; i < kNum; ++i) {
    uint64_t* d = w.R(in.d[i]);
    for (uint32_t l = 0; l < kWarpSize; ++l) {
      const uint32_t r = l / 4, c = 2 * (l % 4);
      const uint16_t lo = kTrans ? rows[i][c][r] : rows[i][r][c];
      const uint16_t hi = kTrans ? rows[i][c + 1][r] : rows[i][r][c + 1];
      d[l] = lo | static_cast<uint32_t>(hi) << 16;
    }
    w.init[in.d[i]] = kFullMask;
  }
  return true;
}

// Fragment layouts of mma.m16n8k8 / m16n8k16 with f16 or bf16 inputs (PTX ISA, "Matrix
// Fragments for mma.m16n8k8" and "... mma.m16n8k16 with floating point type"). Lane l is
// thread t = l % 4 of group g = l / 4; fragment element e sits in register e / 2, the even
// element in the low half.
struct RowCol {
  int row, col;
};
RowCol AElem(uint32_t l, int e) {
  const int g = static_cast<int>(l >> 2), t = static_cast<int>(l & 3);
  return {g + 8 * ((e >> 1) & 1), 2 * t + (e & 1) + 8 * (e >> 2)};
}
RowCol BElem(uint32_t l, int e) {
  const int g = static_cast<int>(l >> 2), t = static_cast<int>(l & 3);
  return {2 * t + (e & 1) + 8 * (e >> 1), g};
}
RowCol CElem(uint32_t l, int e) {
  const int g = static_cast<int>(l >> 2), t = static_cast<int>(l & 3);
  return {g + 8 * (e >> 1), 2 * t + (e & 1)};
}

template <bool kBF16>
double HalfAt(uint64_t reg, int e) {
  const auto h = static_cast<uint16_t>(reg >> (16 * (e & 1)));
  return kBF16 ? BF16ToF32(h) : HalfToF32(h);
}

// D = A * B + C for a 16xK row-major A and a Kx8 column-major B. Products of f16/bf16 are
// exact; the sum is formed in double and rounded once to f32. The ISA does not specify the
// tensor cores' internal order and rounding, so a GPU may differ in the last bits.
template <int kK, bool kBF16>
bool Mma(ExecCtx& ctx, Warp& w, const Instr& in, uint32_t m) {
  if (m != kFullMask) return FailPartialWarp(ctx, "mma", m);
  double a[16][kK], b[kK][8], acc[16][8];
  for (uint32_t l = 0; l < kWarpSize; ++l) {
    for (int e = 0; e < kK / 2; ++e) {
      const RowCol p = AElem(l, e);
      a[p.row][p.col] = HalfAt<kBF16>(w.R(in.s[e / 2])[l], e);
    }
    for (int e = 0; e < kK / 4; ++e) {
      const RowCol p = BElem(l, e);
      b[p.row][p.col] = HalfAt<kBF16>(w.R(in.s2[e / 2])[l], e);
    }
    for (int e = 0; e < 4; ++e) {
      const RowCol p = CElem(l, e);
      acc[p.row][p.col] = BitsToF32(static_cast<uint32_t>(w.R(in.s2[2 + e])[l]));
    }
  }
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      for (int k = 0; k < kK; ++k) acc[i][j] += a[i][k] * b[k][j];
    }
  }
  for (int e = 0; e < 4; ++e) {
    uint64_t* d = w.R(in.d[e]);
    for (uint32_t l = 0; l < kWarpSize; ++l) {
      const RowCol p = CElem(l, e);
      const float v = static_cast<float>(acc[p.row][p.col]);
      d[l] = std::isnan(v) ? 0x7fffffffu : F32ToBits(v);  // the GPU's canonical NaN
    }
    w.init[in.d[e]] = kFullMask;
  }
  return true;
}

}  // namespace

Handler SelectLdmatrix(int num, bool trans, bool generic) {
#define EMU_LDMATRIX(N)                                                               \
  if (num == N) {                                                                     \
    if (generic) return trans ? &Ldmatrix<N, true, true> : &Ldmatrix<N, false, true>; \
    return trans ? &Ldmatrix<N, true, false> : &Ldmatrix<N, false, false>;            \
  }
  EMU_LDMATRIX(1)
  EMU_LDMATRIX(2)
  EMU_LDMATRIX(4)
#undef EMU_LDMATRIX
  return nullptr;
}

Handler SelectMma(int k, bool bf16) {
  if (k == 16) return bf16 ? &Mma<16, true> : &Mma<16, false>;
  if (k == 8) return bf16 ? &Mma<8, true> : &Mma<8, false>;
  return nullptr;
}

}  // namespace ptxserve::emu
