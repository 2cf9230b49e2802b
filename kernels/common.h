// Pieces shared by the kernel generators: element types, launch geometry, config
// parsing helpers and code-generation helpers (addressing, typed vector loads and
// stores with conversion to f32, warp reductions).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/ptx/builder.h"

namespace ptxserve::kernels {

// Storage type of a tensor a kernel reads or writes (KV pools, weights).
enum class ElemType : uint8_t { kF32, kF16, kBF16 };

absl::string_view ElemTypeName(ElemType t);  // "f32", "f16", "bf16"
bool ParseElemType(absl::string_view s, ElemType* out);
// The type as a config key names it: its name.
inline absl::string_view KeyText(ElemType t) { return ElemTypeName(t); }
constexpr int ElemSize(ElemType t) { return t == ElemType::kF32 ? 4 : 2; }

// How to launch a kernel: grid and block in CTAs / threads, dynamic shared bytes.
struct LaunchDims {
  std::array<uint32_t, 3> grid = {1, 1, 1};
  std::array<uint32_t, 3> block = {1, 1, 1};
  uint32_t shared_bytes = 0;
};

// Error unless lo <= v <= hi, naming the config field.
absl::Status CheckRange(absl::string_view field, int64_t v, int64_t lo, int64_t hi);
// One CTA of `threads` per row (token or logits row): grid num_rows (at least 1).
LaunchDims RowLaunch(int threads, int64_t num_rows);

// Threads per CTA of a Config's kernel, for its launch and its .maxntid alike: the Config's
// Threads() where it derives them, else its `threads` field.
template <class Config>
concept HasBlockThreads = requires(const Config& c) {
  c.Threads();
}
|| requires(const Config& c) { c.threads; };
template <HasBlockThreads Config>
int BlockThreads(const Config& cfg) {
  if constexpr (requires { cfg.Threads(); }) {
    return cfg.Threads();
  } else {
    return cfg.threads;
  }
}
// The launch of a kernel run one CTA of BlockThreads(cfg) per row.
template <HasBlockThreads Config>
LaunchDims RowLaunchFor(const Config& cfg, int64_t num_rows) {
  return RowLaunch(BlockThreads(cfg), num_rows);
}
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline bool IsPow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
int Log2(int64_t pow2);

namespace gen {

using ptx::KernelBuilder;
using ptx::Reg;

// base (u64) + idx (u32 or u64) * scale, as a u64 address register.
Reg AddrAdd(KernelBuilder& kb, Reg base, Reg idx, int64_t scale);
// idx / d and idx % d for a u32 idx and a constant d (shifts when d is a power of two).
Reg DivConst(KernelBuilder& kb, Reg idx, int64_t d);
Reg RemConst(KernelBuilder& kb, Reg idx, int64_t d);

// Loads n consecutive elements of `et` at [addr + offset] as f32 registers, using
// vector loads as wide as `align_bytes` (the guaranteed alignment) allows, up to 128 bits.
std::vector<Reg> LoadAsF32(KernelBuilder& kb, ElemType et, Reg addr, int64_t offset, int n,
                           int align_bytes, ptx::CacheOp cache = ptx::CacheOp::kDefault);
// Same into existing f32 registers (loop-carried).
void LoadAsF32To(KernelBuilder& kb, ElemType et, Reg addr, int64_t offset,
                 const std::vector<Reg>& dst, int align_bytes,
                 ptx::CacheOp cache = ptx::CacheOp::kDefault);
// The two halves of `et` (f16 or bf16) in the b32 word `packed` (low half first) as f32
// registers `lo` and `hi`: what a kernel that issues its loads before widening them needs.
void WidenHalfPair(KernelBuilder& kb, ElemType et, Reg packed, Reg lo, Reg hi);
// Stores f32 registers as `et` (round to nearest even) at [addr + offset].
void StoreFromF32(KernelBuilder& kb, ElemType et, Reg addr, int64_t offset,
                  const std::vector<Reg>& vals, int align_bytes);

enum class Reduce : uint8_t { kSum, kMax, kMin };
// Butterfly (shfl.bfly) reduction over groups of `width` lanes: every lane of a
// group ends with the group's result.
Reg WarpAllReduce(KernelBuilder& kb, Reg v, Reduce op, int width = 32);
// shfl.down reduction over the warp: only lane 0 holds the result afterwards.
Reg WarpReduceToLane0(KernelBuilder& kb, Reg v, Reduce op);
// shfl.idx broadcast of lane `lane`'s value to the whole warp.
Reg Broadcast(KernelBuilder& kb, Reg v, int lane = 0);
// The start of a kernel run one CTA per row (RowLaunch): the CTA's row (ctaid.x), after a
// jump to `done` when it is past `num_rows`. The jump is uniform per CTA, so leaving there
// cannot strand a barrier. The kernel binds `done` before its ret.
struct RowCta {
  Reg row;
  ptx::Label done;
};
RowCta EnterRow(KernelBuilder& kb, Reg num_rows);
// Block-wide reduction of an f32 over `num_warps` warps. Uses `scratch` (a shared
// array of at least num_warps + 1 floats): per-warp partials in [0, num_warps), the
// block result in its own slot [num_warps], so no thread reads a partial while
// another overwrites it. Every thread returns the block result. Contains bar.sync:
// all threads of the CTA must call it.
Reg BlockAllReduceF32(KernelBuilder& kb, Reg v, Reduce op, int num_warps,
                      const ptx::Symbol& scratch, Reg lane, Reg warp);
// f32 ops on registers/immediates, shorthand for the table forms.
Reg FAdd(KernelBuilder& kb, const ptx::Operand& a, const ptx::Operand& b);
Reg FMul(KernelBuilder& kb, const ptx::Operand& a, const ptx::Operand& b);
Reg FFma(KernelBuilder& kb, const ptx::Operand& a, const ptx::Operand& b, const ptx::Operand& c);
Reg FMax(KernelBuilder& kb, const ptx::Operand& a, const ptx::Operand& b);
Reg FSub(KernelBuilder& kb, const ptx::Operand& a, const ptx::Operand& b);
Reg UAdd(KernelBuilder& kb, const ptx::Operand& a, const ptx::Operand& b);
Reg UMul(KernelBuilder& kb, const ptx::Operand& a, const ptx::Operand& b);
// silu(g) * u = g / (1 + 2^(-g log2 e)) * u in f32: SwiGLU, one expression for every kernel
// that applies it (silu_mul, the gate/up GEMM's epilogue). A huge -g gives g / inf = 0, not
// NaN.
Reg SiluTimes(KernelBuilder& kb, Reg g, Reg u);

}  // namespace gen
}  // namespace ptxserve::kernels
