#include "kernels/common.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

absl::string_view ElemTypeName(ElemType t) {
  switch (t) {
    case ElemType::kF32:
      return "f32";
    case ElemType::kF16:
      return "f16";
    case ElemType::kBF16:
      return "bf16";
  }
  return "?";
}

bool ParseElemType(absl::string_view s, ElemType* out) {
  if (s == "f32" || s == "float32") {
    *out = ElemType::kF32;
  } else if (s == "f16" || s == "float16") {
    *out = ElemType::kF16;
  } else if (s == "bf16" || s == "bfloat16") {
    *out = ElemType::kBF16;
  } else {
    return false;
  }
  return true;
}

absl::Status CheckRange(absl::string_view field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", v, " is out of range [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

LaunchDims RowLaunch(int threads, int64_t num_rows) {
  LaunchDims d;
  d.grid = {static_cast<uint32_t>(std::max<int64_t>(num_rows, 1)), 1, 1};
  d.block = {static_cast<uint32_t>(threads), 1, 1};
  return d;
}

int Log2(int64_t pow2) {
  int s = 0;
  while ((int64_t{1} << s) < pow2) ++s;
  return s;
}

namespace gen {

Reg AddrAdd(KernelBuilder& kb, Reg base, Reg idx, int64_t scale) {
  Reg off;
  if (ptx::TypeBits(idx.type) == 64) {
    off = kb.Emit(Op::kMulLo, Type::kU64, {idx, scale});
  } else {
    off = kb.Emit(Op::kMulWide, Type::kU32, {idx, static_cast<int64_t>(scale)});
  }
  return kb.Emit(Op::kAdd, Type::kU64, {base, off});
}

RowCta EnterRow(KernelBuilder& kb, Reg num_rows) {
  const ptx::Label done = kb.NewLabel("done");
  const Reg row = kb.Special(ptx::SReg::kCtaidX);
  kb.BraIf(kb.Setp(ptx::Cmp::kGe, Type::kU32, row, num_rows), done);
  return {row, done};
}

Reg DivConst(KernelBuilder& kb, Reg idx, int64_t d) {
  if (d == 1) return idx;
  if (IsPow2(d)) return kb.Emit(Op::kShr, Type::kU32, {idx, Log2(d)});
  return kb.Emit(Op::kDiv, Type::kU32, {idx, d});
}

Reg RemConst(KernelBuilder& kb, Reg idx, int64_t d) {
  if (d == 1) return kb.Mov(Type::kU32, 0);
  if (IsPow2(d)) return kb.Emit(Op::kAnd, Type::kB32, {idx, d - 1});
  return kb.Emit(Op::kRem, Type::kU32, {idx, d});
}

namespace {

// Widest vector (in elements of `bytes` each) usable for n elements at this alignment.
int VecWidth(int n, int bytes, int align_bytes) {
  for (int v = 4; v > 1; v /= 2) {
    if (n % v == 0 && v * bytes <= align_bytes) return v;
  }
  return 1;
}

// The f32 value of the bf16 in the low (hi=false) or high half of a b32 register.
void Bf16HalfToF32(KernelBuilder& kb, Reg packed, bool hi, Reg dst) {
  const Reg bits = hi ? kb.Emit(Op::kAnd, Type::kB32, {packed, static_cast<int64_t>(0xffff0000)})
                      : kb.Emit(Op::kShl, Type::kB32, {packed, 16});
  kb.MovTo(dst, bits);
}

void HalfToF32(KernelBuilder& kb, ElemType et, Reg h16, Reg dst) {
  if (et == ElemType::kF16) {
    kb.CvtTo(dst, Type::kF16, h16);
  } else {
    const Reg wide = kb.Cvt(Type::kU32, Type::kU16, h16);
    Bf16HalfToF32(kb, wide, false, dst);
  }
}

}  // namespace

void WidenHalfPair(KernelBuilder& kb, ElemType et, Reg packed, Reg lo, Reg hi) {
  if (et == ElemType::kF16) {
    const std::vector<Reg> halves = kb.Unpack(packed, Type::kF16);
    kb.CvtTo(lo, Type::kF16, halves[0]);
    kb.CvtTo(hi, Type::kF16, halves[1]);
  } else {
    Bf16HalfToF32(kb, packed, false, lo);
    Bf16HalfToF32(kb, packed, true, hi);
  }
}

std::vector<Reg> LoadAsF32(KernelBuilder& kb, ElemType et, Reg addr, int64_t offset, int n,
                           int align_bytes, CacheOp cache) {
  std::vector<Reg> dst;
  for (int i = 0; i < n; ++i) dst.push_back(kb.NewReg(Type::kF32));
  LoadAsF32To(kb, et, addr, offset, dst, align_bytes, cache);
  return dst;
}

void LoadAsF32To(KernelBuilder& kb, ElemType et, Reg addr, int64_t offset,
                 const std::vector<Reg>& dst, int align_bytes, CacheOp cache) {
  const int n = static_cast<int>(dst.size());
  if (et == ElemType::kF32) {
    const int v = VecWidth(n, 4, align_bytes);
    for (int i = 0; i < n; i += v) {
      kb.LdTo(Space::kGlobal, Type::kF32, Operand::Addr(addr, offset + 4 * i),
              std::vector<Reg>(dst.begin() + i, dst.begin() + i + v), cache);
    }
    return;
  }
  // Half types: pairs travel as b32 words (up to 4 per load), singles as b16.
  if (n % 2 != 0 || align_bytes < 4) {
    for (int i = 0; i < n; ++i) {
      const Reg h = kb.Ld1(Space::kGlobal, Type::kB16, Operand::Addr(addr, offset + 2 * i), cache);
      HalfToF32(kb, et, h, dst[i]);
    }
    return;
  }
  const int words = n / 2;
  const int v = VecWidth(words, 4, align_bytes);
  for (int w = 0; w < words; w += v) {
    const std::vector<Reg> packed =
        kb.Ld(Space::kGlobal, Type::kB32, Operand::Addr(addr, offset + 4 * w), v, cache);
    for (int j = 0; j < v; ++j) {
      const int e = 2 * (w + j);
      WidenHalfPair(kb, et, packed[j], dst[e], dst[e + 1]);
    }
  }
}

void StoreFromF32(KernelBuilder& kb, ElemType et, Reg addr, int64_t offset,
                  const std::vector<Reg>& vals, int align_bytes) {
  const int n = static_cast<int>(vals.size());
  if (et == ElemType::kF32) {
    const int v = VecWidth(n, 4, align_bytes);
    for (int i = 0; i < n; i += v) {
      kb.St(Space::kGlobal, Type::kF32, Operand::Addr(addr, offset + 4 * i),
            std::vector<Reg>(vals.begin() + i, vals.begin() + i + v));
    }
    return;
  }
  const Type half = et == ElemType::kF16 ? Type::kF16 : Type::kBF16;
  const Type pair = et == ElemType::kF16 ? Type::kF16x2 : Type::kBF16x2;
  if (n % 2 != 0 || align_bytes < 4) {
    for (int i = 0; i < n; ++i) {
      const Reg h = kb.Cvt(half, Type::kF32, vals[i], ptx::Round::kRn);
      kb.St(Space::kGlobal, half, Operand::Addr(addr, offset + 2 * i), {h});
    }
    return;
  }
  std::vector<Reg> words;
  for (int i = 0; i < n; i += 2) words.push_back(kb.CvtPack(pair, vals[i + 1], vals[i]));
  const int nw = static_cast<int>(words.size());
  const int v = VecWidth(nw, 4, align_bytes);
  for (int w = 0; w < nw; w += v) {
    kb.St(Space::kGlobal, Type::kB32, Operand::Addr(addr, offset + 4 * w),
          std::vector<Reg>(words.begin() + w, words.begin() + w + v));
  }
}

namespace {

Reg Combine(KernelBuilder& kb, Reduce op, Reg a, Reg b) {
  const Op o = op == Reduce::kSum ? Op::kAdd : (op == Reduce::kMax ? Op::kMax : Op::kMin);
  return kb.Emit(o, a.type, {a, b});
}

}  // namespace

Reg WarpAllReduce(KernelBuilder& kb, Reg v, Reduce op, int width) {
  for (int off = width / 2; off >= 1; off /= 2) {
    v = Combine(kb, op, v, kb.Shfl(ptx::ShflMode::kBfly, v, off));
  }
  return v;
}

Reg WarpReduceToLane0(KernelBuilder& kb, Reg v, Reduce op) {
  for (int off = 16; off >= 1; off /= 2) {
    v = Combine(kb, op, v, kb.Shfl(ptx::ShflMode::kDown, v, off));
  }
  return v;
}

Reg Broadcast(KernelBuilder& kb, Reg v, int lane) { return kb.Shfl(ptx::ShflMode::kIdx, v, lane); }

Reg BlockAllReduceF32(KernelBuilder& kb, Reg v, Reduce op, int num_warps,
                      const ptx::Symbol& scratch, Reg lane, Reg warp) {
  Reg part = WarpReduceToLane0(kb, v, op);
  if (num_warps == 1) return Broadcast(kb, part);
  const Reg base = kb.AddressOf(scratch);
  const Reg is_lane0 = kb.Setp(ptx::Cmp::kEq, Type::kU32, lane, 0);
  const Reg slot = kb.Emit(Op::kMadLo, Type::kU32, {warp, 4, base});
  {
    auto g = kb.If(is_lane0);
    kb.St(Space::kShared, Type::kF32, Operand::Addr(slot), {part});
  }
  kb.BarSync();
  // Warp 0 combines the partials; the others skip the work but not the barriers.
  const Reg in_range = kb.Setp(ptx::Cmp::kLt, Type::kU32, lane, num_warps);
  const float identity = op == Reduce::kSum ? 0.0f : (op == Reduce::kMax ? -INFINITY : INFINITY);
  const Reg x = kb.Mov(Type::kF32, Operand::F32(identity));
  const Reg lslot = kb.Emit(Op::kMadLo, Type::kU32, {lane, 4, base});
  {
    auto g = kb.If(in_range);
    kb.LdTo(Space::kShared, Type::kF32, Operand::Addr(lslot), {x});
  }
  const Reg total = WarpReduceToLane0(kb, x, op);
  const Reg w0 = kb.Setp(ptx::Cmp::kEq, Type::kU32, warp, 0);
  const Reg writer = kb.Emit(Op::kAnd, Type::kPred, {w0, is_lane0});
  {
    auto g = kb.If(writer);
    kb.St(Space::kShared, Type::kF32, Operand::Addr(base, 4 * num_warps), {total});
  }
  kb.BarSync();
  return kb.Ld1(Space::kShared, Type::kF32, Operand::Addr(base, 4 * num_warps));
}

Reg FAdd(KernelBuilder& kb, const Operand& a, const Operand& b) {
  return kb.Emit(Op::kAdd, Type::kF32, {a, b});
}
Reg FMul(KernelBuilder& kb, const Operand& a, const Operand& b) {
  return kb.Emit(Op::kMul, Type::kF32, {a, b});
}
Reg FFma(KernelBuilder& kb, const Operand& a, const Operand& b, const Operand& c) {
  return kb.Emit(Op::kFma, Type::kF32, {a, b, c});
}
Reg FMax(KernelBuilder& kb, const Operand& a, const Operand& b) {
  return kb.Emit(Op::kMax, Type::kF32, {a, b});
}
Reg FSub(KernelBuilder& kb, const Operand& a, const Operand& b) {
  return kb.Emit(Op::kSub, Type::kF32, {a, b});
}
Reg UAdd(KernelBuilder& kb, const Operand& a, const Operand& b) {
  return kb.Emit(Op::kAdd, Type::kU32, {a, b});
}
Reg UMul(KernelBuilder& kb, const Operand& a, const Operand& b) {
  return kb.Emit(Op::kMulLo, Type::kU32, {a, b});
}
Reg SiluTimes(KernelBuilder& kb, Reg g, Reg u) {
  constexpr float kLog2e = 1.4426950408889634f;
  const Reg ex = kb.Emit(Op::kEx2, Type::kF32, {FMul(kb, g, Operand::F32(-kLog2e))});
  const Reg s = kb.Emit(Op::kDiv, Type::kF32, {g, FAdd(kb, ex, Operand::F32(1.0f))});
  return FMul(kb, s, u);
}

}  // namespace gen
}  // namespace ptxserve::kernels
