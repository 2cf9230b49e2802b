#include "kernels/gemm_quant.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/gemm_quant_decode.h"
#include "kernels/gemm_quant_normed_x.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

// Lane units (32 elements each) a warp stages per step, two per lane: a q8_0 step is 2176
// bytes (137 16-byte units at most with the row's misalignment), so a lane keeps 5 loads in
// flight.
constexpr int kStepUnits = 64;
constexpr int kUnitBytes = 16;

// Two f16 codes packed in `h` as f32 registers, into codes[lo] and codes[hi].
void WidenCodePair(KernelBuilder& kb, Reg h, std::vector<Reg>& codes, int lo, int hi) {
  const std::vector<Reg> halves = kb.Unpack(h, Type::kF16);
  codes[lo] = kb.Cvt(Type::kF32, Type::kF16, halves[0]);
  codes[hi] = kb.Cvt(Type::kF32, Type::kF16, halves[1]);
}

// fp8: bytes 0 and 2 (`shift` 8) or 1 and 3 (`shift` 0) of `w` as an f16x2 whose halves are
// the codes' values times 2^-8: each byte's sign goes to bit 15 of its half and its 7 bits
// of exponent and mantissa to bits 13..7, bit 14 zero. E4M3's 4-bit exponent (bias 7) lands
// in the low bits of f16's 5-bit one (bias 15), so this is exact for every code, subnormals
// too (m 2^-9 becomes m 2^-17). Two masks of shifted copies: no byte needs isolating first.
Reg E4M3PairToF16x2(KernelBuilder& kb, Reg w, int shift) {
  const Reg s8 = shift == 0 ? w : kb.Emit(Op::kShl, Type::kB32, {w, shift});
  const Reg s7 = shift == 0 ? kb.Emit(Op::kShr, Type::kB32, {w, 1})
                            : kb.Emit(Op::kShl, Type::kB32, {w, shift - 1});
  const Reg sign = kb.Emit(Op::kAnd, Type::kB32, {s8, static_cast<int64_t>(0x80008000)});
  const Reg rest = kb.Emit(Op::kAnd, Type::kB32, {s7, 0x3F803F80});
  return kb.Emit(Op::kOr, Type::kB32, {sign, rest});
}

// 4-bit codes become f32 without a cvt: a nibble, alone in its byte, moved by prmt under
// the exponent byte of 2^23 is the f32 2^23 + q, exact, and one subtraction of 2^23 + zero
// point leaves q - zero point, exact. Two instructions a code, where extracting, converting
// and offsetting each code takes three.
constexpr int64_t kMagicBits = 0x4B000000;  // 2^23 as f32 bits
constexpr int64_t kMagicSelect = 0x7440;    // bytes (x, 0, 0, 0x4B): selects x's byte 0..3

struct NibbleBytes {
  Reg lo, hi;  // the word's low and high nibbles, each alone in its byte
};
NibbleBytes SplitNibbles(KernelBuilder& kb, Reg w) {
  return {kb.Emit(Op::kAnd, Type::kB32, {w, 0x0F0F0F0F}),
          kb.Emit(Op::kAnd, Type::kB32, {kb.Emit(Op::kShr, Type::kB32, {w, 4}), 0x0F0F0F0F})};
}
// Byte `b` of `nibbles` less the zero point `zero` (given as the f32 2^23 + zero point).
Reg MagicCode(KernelBuilder& kb, Reg nibbles, int b, const Operand& zero) {
  return kb.Emit(Op::kSub, Type::kF32,
                 {kb.Emit(Op::kPrmt, Type::kB32, {nibbles, kMagicBits, kMagicSelect + b}), zero});
}

}  // namespace

namespace gen {

LaneUnit DecodeBlock(KernelBuilder& kb, BlockFormat f, BlockReader& r) {
  LaneUnit u;
  u.codes.resize(kQuantLaneElems);
  if (f == BlockFormat::kFp8E4M3) {
    u.d = gen::FMul(kb, r.Scale(kb), Operand::F32(256.0f));
    for (int i = 0; i < kQuantLaneElems / 4; ++i) {
      const Reg w = r.CodeUnit(kb, i);
      WidenCodePair(kb, E4M3PairToF16x2(kb, w, 8), u.codes, 4 * i, 4 * i + 2);
      WidenCodePair(kb, E4M3PairToF16x2(kb, w, 0), u.codes, 4 * i + 1, 4 * i + 3);
    }
    return u;
  }
  if (f == BlockFormat::kInt4G128) {
    // The header word: f16 s in bits 0..15, z in 16..23, a zero pad byte. z as the f32
    // 2^23 + z (its byte under 2^23's exponent), which every code's 2^23 + q less is q - z.
    const Reg hdr = r.Scale(kb);
    u.d = kb.Cvt(Type::kF32, Type::kF16, kb.Unpack(hdr, Type::kB16)[0]);
    const Reg zf = kb.Emit(Op::kPrmt, Type::kB32, {hdr, kMagicBits, kMagicSelect + 2});
    for (int i = 0; i < kQuantLaneElems / 8; ++i) {
      // Byte b of the word holds elements 8i + 2b (low nibble) and 8i + 2b + 1 (high).
      const NibbleBytes nb = SplitNibbles(kb, r.CodeUnit(kb, i));
      for (int b = 0; b < 4; ++b) {
        u.codes[8 * i + 2 * b] = MagicCode(kb, nb.lo, b, zf);
        u.codes[8 * i + 2 * b + 1] = MagicCode(kb, nb.hi, b, zf);
      }
    }
    return u;
  }
  u.d = kb.Cvt(Type::kF32, Type::kF16, r.Scale(kb));
  if (f == BlockFormat::kQ8_0) {
    const int ub = r.CodeBytes();
    for (int i = 0; i < kQuantLaneElems / ub; ++i) {
      const Reg v = r.CodeUnit(kb, i);
      for (int byte = 0; byte < ub; ++byte) {
        const Reg q = kb.Emit(Op::kBfe, Type::kS32, {v, 8 * byte, 8});  // sign-extended
        u.codes[ub * i + byte] = kb.Cvt(Type::kF32, Type::kS32, q, ptx::Round::kRn);
      }
    }
    return u;
  }
  const Operand q4_zero = Operand::F32(0x1p23f + 8);
  for (int i = 0; i < kQuantLaneElems / 8; ++i) {
    // Byte b of the word holds elements 4i + b (low nibble) and 4i + b + 16 (high).
    const NibbleBytes nb = SplitNibbles(kb, r.CodeUnit(kb, i));
    for (int b = 0; b < 4; ++b) {
      u.codes[4 * i + b] = MagicCode(kb, nb.lo, b, q4_zero);
      u.codes[4 * i + b + 16] = MagicCode(kb, nb.hi, b, q4_zero);
    }
  }
  return u;
}

namespace {
// A block in shared memory at `a` + `off` (DecodeLaneUnit).
class SharedBlockReader : public BlockReader {
 public:
  SharedBlockReader(BlockFormat f, const LaneUnitAddr& a, int64_t off) : f_(f), a_(a), off_(off) {}
  Reg Scale(KernelBuilder& kb) override {
    switch (f_) {
      case BlockFormat::kFp8E4M3:
        return kb.Ld1(Space::kShared, Type::kF32, Operand::Addr(a_.blk, off_));
      case BlockFormat::kInt4G128:
        return kb.Ld1(Space::kShared, Type::kB32, Operand::Addr(a_.blk, off_));
      case BlockFormat::kQ8_0:
      case BlockFormat::kQ4_0:
        break;
    }
    return kb.Ld1(Space::kShared, Type::kB16, Operand::Addr(a_.blk, off_));
  }
  Reg CodeUnit(KernelBuilder& kb, int i) override {
    switch (f_) {
      case BlockFormat::kFp8E4M3:
        return kb.Ld1(Space::kShared, Type::kB32, Operand::Addr(a_.blk, off_ + 4 + 4 * i));
      case BlockFormat::kInt4G128:
        return kb.Ld1(Space::kShared, Type::kB32, Operand::Addr(a_.codes, off_ + 4 * i));
      case BlockFormat::kQ8_0: {
        // Two code bytes per load: the only width the blocks' 2-byte alignment allows.
        const Reg h = kb.Ld1(Space::kShared, Type::kU16, Operand::Addr(a_.blk, off_ + 2 + 2 * i));
        return kb.Cvt(Type::kU32, Type::kU16, h);
      }
      case BlockFormat::kQ4_0:
        break;
    }
    // q4_0: the 16 nibble bytes start 2 bytes into the block, which is 4-byte aligned in
    // every other block: five aligned words cover them, and prmt takes each word's 4 bytes
    // from a pair (a's upper half and b's lower one where they start at 2 mod 4).
    if (aligned_.empty()) {
      for (int j = 0; j < 5; ++j) {
        aligned_.push_back(
            kb.Ld1(Space::kShared, Type::kB32, Operand::Addr(a_.codes, off_ + 4 * j)));
      }
    }
    return kb.Emit(Op::kPrmt, Type::kB32, {aligned_[i], aligned_[i + 1], a_.sel});
  }
  int CodeBytes() const override { return f_ == BlockFormat::kQ8_0 ? 2 : 4; }

 private:
  BlockFormat f_;
  LaneUnitAddr a_;
  int64_t off_;
  std::vector<Reg> aligned_;  // q4_0: the five aligned words, once loaded
};
}  // namespace

LaneUnit DecodeLaneUnit(KernelBuilder& kb, BlockFormat f, const LaneUnitAddr& a, int64_t off) {
  SharedBlockReader r(f, a, off);
  return DecodeBlock(kb, f, r);
}

LaneUnitAddr Q4_0LaneUnitAddr(KernelBuilder& kb, Reg blk) {
  // The aligned word at or below the nibbles (2 bytes in), and the selector that takes
  // bytes 0..3 of a word pair when they are aligned, 2..5 when not.
  const Reg nibbles = gen::UAdd(kb, blk, 2);
  return {blk, kb.Emit(Op::kAnd, Type::kB32, {nibbles, ~int64_t{3} & 0xFFFFFFFF}),
          kb.Emit(Op::kMadLo, Type::kU32,
                  {kb.Emit(Op::kAnd, Type::kB32, {nibbles, 2}), 0x1111, 0x3210})};
}

}  // namespace gen

namespace {

constexpr BlockFormat kAllFormats[] = {BlockFormat::kQ8_0, BlockFormat::kQ4_0,
                                       BlockFormat::kFp8E4M3, BlockFormat::kInt4G128};

}  // namespace

absl::string_view BlockFormatName(BlockFormat f) {
  switch (f) {
    case BlockFormat::kQ8_0:
      return "q8_0";
    case BlockFormat::kQ4_0:
      return "q4_0";
    case BlockFormat::kFp8E4M3:
      return "fp8_e4m3";
    case BlockFormat::kInt4G128:
      break;
  }
  return "int4_g128";
}

bool ParseBlockFormat(absl::string_view s, BlockFormat* out) {
  for (BlockFormat f : kAllFormats) {
    if (s == BlockFormatName(f)) {
      *out = f;
      return true;
    }
  }
  return false;
}

absl::Status QuantGemmConfig::CheckAcrossFields() const {
  if (tensor_cores) return CheckQuantGemmMma(*this);
  if ((split & (split - 1)) != 0 || warps % split != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("qgemm: split = ", split, " must be 1, 2 or 4 and divide warps = ", warps));
  }
  if (cols != 1 && split != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("qgemm: cols = ", cols, " with split = ", split, ": one of them must be 1"));
  }
  if (k % (split * BlockElems(format)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("qgemm: k = ", k, " is not a multiple of ", BlockFormatName(format), "'s ",
                     BlockElems(format), "-element blocks times split = ", split));
  }
  return absl::OkStatus();
}

LaunchDims QuantGemmLaunch(const QuantGemmConfig& cfg, int64_t m) {
  if (cfg.tensor_cores) return QuantGemmMmaLaunch(cfg, m);
  LaunchDims d;
  d.grid = {static_cast<uint32_t>(CeilDiv(cfg.n, cfg.Columns())),
            static_cast<uint32_t>(std::max<int64_t>(CeilDiv(m, cfg.m_tile), 1)), 1};
  d.block = {static_cast<uint32_t>(cfg.Threads()), 1, 1};
  return d;
}

QuantGemmConfig QuantGemmConfigFor(QuantGemmConfig base, int64_t m) {
  base.m_tile = static_cast<int>(std::clamp<int64_t>(m, 1, 8));
  // Few columns (a Llama-3.2-1B k/v projection: 512, 128 CTAs of 4 warps) leave the grid
  // bound by one warp's chain: split K while each slice keeps 512 elements. Wider GEMVs
  // keep whole rows, where a split's extra per-warp work costs more issue than it saves.
  // Many columns (gate/up: 16384) fill the GPU many times over: there a warp takes two
  // columns at up to 2 rows, so its fixed work (addresses, the reduction) and each x load
  // serve twice the weights, which keeps 4-bit formats below the instruction-issue limit.
  base.cols = base.n >= 8192 && base.m_tile <= 2 ? 2 : 1;
  base.split = 1;
  for (int s : {2, 4}) {
    if (base.n <= 1024 && base.warps % s == 0 && base.k % (s * BlockElems(base.format)) == 0 &&
        base.k / s >= 512) {
      base.split = s;
    }
  }
  return base;
}

absl::StatusOr<std::string> GenerateQuantGemm(const QuantGemmConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) -> std::string {
    if (cfg.tensor_cores) return gen::QuantGemmMma(kb, cfg);
    const int bb = BlockBytes(cfg.format);
    const int be = BlockElems(cfg.format);
    // Lane units per block (1, or 4 for int4_g128) as a shift.
    const int upb_log2 = be == 128 ? 2 : 0;
    const int split_log2 = cfg.split == 4 ? 2 : cfg.split - 1;
    const int nc = cfg.cols;                                 // columns per warp
    const int64_t nu = cfg.k / kQuantLaneElems / cfg.split;  // lane units per row and slice
    const int64_t row_bytes = cfg.k / be * bb;
    const int64_t slice_bytes = row_bytes / cfg.split;
    const int64_t steps = CeilDiv(nu, kStepUnits);
    const int64_t step_bytes = int64_t{kStepUnits >> upb_log2} * bb;  // a multiple of 16
    // 16-byte units a step may need: its bytes plus the row's misalignment (at most 14).
    const int units = static_cast<int>(
        CeilDiv(14 + (std::min<int64_t>(nu, kStepUnits) >> upb_log2) * bb, kUnitBytes));
    const int rounds = static_cast<int>(CeilDiv(units, 32));
    const int64_t region_bytes = int64_t{rounds} * 32 * kUnitBytes;  // one column's staging
    const int mt = cfg.m_tile;

    // The fused RMSNorm's parameters (norm_w, eps) are declared only with cfg.norm.
    const gen::GemvParams params = gen::DeclareGemvParams(kb, cfg.norm, cfg.has_bias);
    const Reg x = params.x, norm_w = params.norm_w, w = params.w, bias = params.bias, y = params.y,
              m_rows = params.m_rows, eps = params.eps;
    const bool dependent = cfg.GridDependent();
    if (dependent) kb.GridDepLaunchDependents();
    // q4_0 lanes read up to 4 bytes past their block (the fifth aligned word).
    const ptx::Symbol stage =
        kb.Shared("blocks", int64_t{cfg.warps} * nc * region_bytes +
                                (cfg.format == BlockFormat::kQ4_0 ? kUnitBytes : 0));

    // Every warp runs every step: the steps share bar.sync, so a warp past the last column
    // works on column n - 1 and stores nothing. Only whole CTAs leave early (rows past M).
    const ptx::Label done = kb.NewLabel("done");
    const Reg tid = kb.Special(SReg::kTidX);
    const Reg lane = kb.Emit(Op::kAnd, Type::kB32, {tid, 31});
    const Reg warp = kb.Emit(Op::kShr, Type::kU32, {tid, 5});
    // Warp w works on columns cols * (w / split) + c of the CTA's, slice w % split of K.
    const Reg col_first = kb.Emit(
        Op::kMadLo, Type::kU32,
        {kb.Special(SReg::kCtaidX), cfg.Columns(),
         kb.Emit(
             Op::kMulLo, Type::kU32,
             {split_log2 == 0 ? warp : kb.Emit(Op::kShr, Type::kU32, {warp, split_log2}), nc})});
    const Reg slice =
        split_log2 == 0 ? Reg{} : kb.Emit(Op::kAnd, Type::kB32, {warp, cfg.split - 1});
    const Reg m0 = kb.Emit(Op::kMulLo, Type::kU32, {kb.Special(SReg::kCtaidY), mt});
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, m0, m_rows), done);
    const Reg last_row = kb.Emit(Op::kSub, Type::kU32, {m_rows, 1});

    // Per column of the warp: its row's blocks start `head` bytes into the aligned unit that
    // holds their first byte; `src` is the step's first unit, `region` its staging.
    struct Column {
      Reg ok, col, head, src, dst;
      gen::LaneUnitAddr unit0;  // the lane's first unit of a step
    };
    std::vector<Column> cols(nc);
    for (int c = 0; c < nc; ++c) {
      Column& k = cols[c];
      const Reg raw = c == 0 ? col_first : gen::UAdd(kb, col_first, c);
      k.ok = kb.Setp(Cmp::kLt, Type::kU32, raw, cfg.n);
      k.col = kb.Emit(Op::kMin, Type::kU32, {raw, cfg.n - 1});
      Reg row = gen::AddrAdd(kb, w, k.col, row_bytes);
      if (split_log2 != 0) row = gen::AddrAdd(kb, row, slice, slice_bytes);
      k.head = kb.Emit(Op::kAnd, Type::kB32, {kb.Cvt(Type::kU32, Type::kU64, row), 15});
      k.src = kb.Emit(Op::kAnd, Type::kB64, {row, static_cast<int64_t>(~uint64_t{15})});
      const Reg region = kb.Emit(
          Op::kMadLo, Type::kU32,
          {warp, nc * region_bytes, gen::UAdd(kb, kb.AddressOf(stage), int64_t{c} * region_bytes)});
      k.dst = kb.Emit(Op::kMadLo, Type::kU32, {lane, kUnitBytes, region});
      // Lane's units in a step: `lane` and 32 + lane, in blocks lane / upb and (32 + lane) /
      // upb at head + j * bb in the staging, quarter lane % upb of an int4_g128 block.
      gen::LaneUnitAddr& a = k.unit0;
      a.blk = kb.Emit(Op::kMadLo, Type::kU32,
                      {upb_log2 == 0 ? lane : kb.Emit(Op::kShr, Type::kU32, {lane, upb_log2}), bb,
                       gen::UAdd(kb, region, k.head)});
      if (cfg.format == BlockFormat::kInt4G128) {
        // An int4_g128 lane's nibbles: quarter lane % 4 of its block, past the 4-byte header.
        a.codes = kb.Emit(Op::kMadLo, Type::kU32,
                          {kb.Emit(Op::kAnd, Type::kB32, {lane, (1 << upb_log2) - 1}), 16,
                           gen::UAdd(kb, a.blk, 4)});
      } else if (cfg.format == BlockFormat::kQ4_0) {
        // Blocks move by multiples of 4 bytes from unit to unit, so the first unit's nibble
        // word and selector hold for all of the lane's.
        a = gen::Q4_0LaneUnitAddr(kb, a.blk);
      }
    }
    // x of unit `lane` of the step, for each row of the tile; rows past M read the last
    // row (valid memory) and are never stored. With the fused RMSNorm, normed x staged by
    // the CTA where its rows fit (gemm_quant_normed_x.h), else norm_w applied in the loop.
    const bool stage_x = gen::NormedX::Fits(cfg);
    const bool norm_in_loop = cfg.norm && !stage_x;
    std::optional<gen::NormedX> normed_x;
    std::vector<Reg> x_lane(stage_x ? 0 : mt);
    if (stage_x) normed_x.emplace(kb, cfg, lane, slice, nu);
    for (int m = 0; m < static_cast<int>(x_lane.size()); ++m) {
      const Reg r = kb.Emit(Op::kMin, Type::kU32, {gen::UAdd(kb, m0, m), last_row});
      Reg xr = gen::AddrAdd(kb, x, r, int64_t{cfg.k} * 4);
      if (split_log2 != 0) xr = gen::AddrAdd(kb, xr, slice, nu * kQuantLaneElems * 4);
      x_lane[m] = gen::AddrAdd(kb, xr, lane, int64_t{kQuantLaneElems} * 4);
    }
    // With the fused RMSNorm: norm_w at the lane's elements of the slice, and each row's sum
    // of squares (of the slice's elements, until the slices' sums meet).
    Reg nw_lane;
    std::vector<Reg> sq(norm_in_loop ? mt : 0);
    if (norm_in_loop) {
      const Reg nw =
          split_log2 == 0 ? norm_w : gen::AddrAdd(kb, norm_w, slice, nu * kQuantLaneElems * 4);
      nw_lane = gen::AddrAdd(kb, nw, lane, int64_t{kQuantLaneElems} * 4);
      for (Reg& q : sq) q = kb.Mov(Type::kF32, Operand::F32(0.0f));
    }
    // norm_w scales whichever has fewer registers a unit: x (each row's 32 elements, once
    // for the warp's columns) when the tile has no more rows than the warp columns, else the
    // codes (once for all the tile's rows).
    const bool norm_x = norm_in_loop && mt <= nc;
    std::vector<std::vector<Reg>> acc(nc, std::vector<Reg>(mt));
    for (std::vector<Reg>& ac : acc) {
      for (Reg& a : ac) a = kb.Mov(Type::kF32, Operand::F32(0.0f));
    }

    // What holds in every step, known here: all steps but the last take kStepUnits units,
    // the last (the smallest) the rest. Rounds every lane needs in every step (even the
    // smallest at head 0) load unclamped; passes every lane has units for skip no lanes; a
    // single step needs no loop.
    const int64_t last_units = nu - (steps - 1) * kStepUnits;
    const int free_rounds = static_cast<int>(
        std::min<int64_t>(rounds, (last_units >> upb_log2) * bb / kUnitBytes / 32));
    auto pass_full = [&](int p) { return int64_t{32} * (p + 1) <= last_units; };
    // x of the first pass, loaded with the blocks (before the barriers) so that its latency
    // hides under theirs, where its registers stay few and every lane's units exist.
    const bool early_x = mt <= 2 && pass_full(0);
    std::vector<Reg> src_lane(nc);  // the lane's unit in the first round
    for (int c = 0; c < nc; ++c) src_lane[c] = gen::AddrAdd(kb, cols[c].src, lane, kUnitBytes);
    if (dependent) {
      // The first step's blocks stream into L2 while the previous kernel finishes.
      for (int c = 0; c < nc; ++c) {
        for (int r = 0; r < free_rounds; ++r) {
          kb.PrefetchL2(Operand::Addr(src_lane[c], int64_t{r} * 32 * kUnitBytes));
        }
      }
      kb.GridDepWait();
    }
    // The staged rows' sums of squares are the CTA's: added up before the loop, or (one
    // step) while the step's blocks load.
    auto stage_normed_x = [&] { sq = normed_x->Stage(kb, params, m0, last_row, tid, lane, warp); };
    if (stage_x && steps > 1) stage_normed_x();
    Reg left, t;
    std::optional<ptx::Label> loop;
    if (steps > 1) {
      left = kb.Mov(Type::kU32, static_cast<int64_t>(nu));  // units not yet read
      t = kb.Mov(Type::kU32, 0);
      loop = kb.NewLabel("step");
      kb.Bind(*loop);
    }
    const Operand step_units =
        steps > 1 ? Operand(kb.Emit(Op::kMin, Type::kU32, {left, kStepUnits})) : Operand(nu);
    std::vector<std::vector<Reg>> unit;
    for (int c = 0; c < nc; ++c) {
      const Column& k = cols[c];
      for (int r = 0; r < free_rounds; ++r) {
        unit.push_back(kb.Ld(Space::kGlobal, Type::kB32,
                             Operand::Addr(src_lane[c], int64_t{r} * 32 * kUnitBytes), 4,
                             ptx::CacheOp::kNonCoherent));
      }
      if (free_rounds == rounds) continue;
      // The step's units: its bytes plus the row's misalignment, in whole units.
      const Reg needed = kb.Emit(
          Op::kShr, Type::kU32,
          {steps > 1 ? kb.Emit(Op::kMadLo, Type::kU32,
                               {upb_log2 == 0
                                    ? step_units.reg()
                                    : kb.Emit(Op::kShr, Type::kU32, {step_units.reg(), upb_log2}),
                                bb, gen::UAdd(kb, k.head, kUnitBytes - 1)})
                     : gen::UAdd(kb, k.head, (nu >> upb_log2) * bb + kUnitBytes - 1),
           4});
      // Lanes past the step's last unit load that unit again (a sector the warp reads
      // anyway), so every lane loads and stores unguarded.
      const Reg last_unit = kb.Emit(Op::kSub, Type::kU32, {needed, 1});
      for (int r = free_rounds; r < rounds; ++r) {
        const Reg u = kb.Emit(Op::kMin, Type::kU32, {gen::UAdd(kb, lane, 32 * r), last_unit});
        unit.push_back(kb.Ld(Space::kGlobal, Type::kB32,
                             Operand::Addr(gen::AddrAdd(kb, k.src, u, 16)), 4,
                             ptx::CacheOp::kNonCoherent));
      }
    }
    if (stage_x && steps == 1) stage_normed_x();
    // x of pass p's unit for each row of the tile, with norm_w last (norm_in_loop).
    auto load_x = [&](int p) {
      const int64_t off = int64_t{32} * p * kQuantLaneElems * 4;
      std::vector<std::vector<Reg>> xv(mt);
      for (int m = 0; m < mt; ++m) {
        if (!stage_x) {
          xv[m] = gen::LoadAsF32(kb, ElemType::kF32, x_lane[m], off, kQuantLaneElems, 16);
          continue;
        }
        xv[m] = normed_x->Load(kb, m, off);
      }
      if (norm_in_loop)
        xv.push_back(gen::LoadAsF32(kb, ElemType::kF32, nw_lane, off, kQuantLaneElems, 16));
      return xv;
    };
    std::vector<std::vector<Reg>> x_first;
    if (early_x) x_first = load_x(0);
    kb.BarSync();  // the previous step's blocks are decoded: the staging may be refilled
    for (int c = 0; c < nc; ++c) {
      for (int r = 0; r < rounds; ++r) {
        kb.St(Space::kShared, Type::kB32, Operand::Addr(cols[c].dst, int64_t{r} * 32 * kUnitBytes),
              unit[c * rounds + r]);
      }
    }
    kb.BarSync();  // this step's units are visible to every lane
    for (int p = 0; p < kStepUnits / 32; ++p) {
      // A branch, not a guard: ptxas (13.0) spills this block to local memory when it is
      // guarded and the step loop repeats.
      std::optional<ptx::Label> skip;
      if (!pass_full(p)) {
        skip = kb.NewLabel("skip");
        kb.BraIf(
            kb.Setp(Cmp::kGe, Type::kU32, p == 0 ? lane : gen::UAdd(kb, lane, 32 * p), step_units),
            *skip);
      }
      // x is loaded once for the warp's columns.
      std::vector<std::vector<Reg>> xv = p == 0 && early_x ? x_first : load_x(p);
      std::vector<Reg> nv;
      if (norm_in_loop) {
        nv = std::move(xv.back());
        xv.pop_back();
        for (int m = 0; m < mt; ++m) {
          for (int e = 0; e < kQuantLaneElems; ++e)
            kb.EmitTo(sq[m], Op::kFma, Type::kF32, {xv[m][e], xv[m][e], sq[m]});
          if (norm_x) {
            for (int e = 0; e < kQuantLaneElems; ++e) xv[m][e] = gen::FMul(kb, xv[m][e], nv[e]);
          }
        }
      }
      for (int c = 0; c < nc; ++c) {
        gen::LaneUnit block =
            gen::DecodeLaneUnit(kb, cfg.format, cols[c].unit0, int64_t{32 * p >> upb_log2} * bb);
        if (norm_in_loop && !norm_x) {
          for (int e = 0; e < kQuantLaneElems; ++e)
            block.codes[e] = gen::FMul(kb, block.codes[e], nv[e]);
        }
        for (int m = 0; m < mt; ++m) {
          // The scale applies once per lane unit and row: acc += d * (x . codes).
          const Reg dot = gen::FMul(kb, xv[m][0], block.codes[0]);
          for (int e = 1; e < kQuantLaneElems; ++e)
            kb.EmitTo(dot, Op::kFma, Type::kF32, {xv[m][e], block.codes[e], dot});
          kb.EmitTo(acc[c][m], Op::kFma, Type::kF32, {block.d, dot, acc[c][m]});
        }
      }
      if (skip) kb.Bind(*skip);
    }
    if (steps > 1) {
      for (Reg& sl : src_lane) kb.EmitTo(sl, Op::kAdd, Type::kU64, {sl, step_bytes});
      if (free_rounds < rounds) {
        for (Column& k : cols) kb.EmitTo(k.src, Op::kAdd, Type::kU64, {k.src, step_bytes});
      }
      for (Reg& xa : x_lane)
        kb.EmitTo(xa, Op::kAdd, Type::kU64, {xa, int64_t{kStepUnits} * kQuantLaneElems * 4});
      if (normed_x) normed_x->Advance(kb, int64_t{kStepUnits} * kQuantLaneElems * 4);
      if (norm_in_loop) {
        kb.EmitTo(nw_lane, Op::kAdd, Type::kU64,
                  {nw_lane, int64_t{kStepUnits} * kQuantLaneElems * 4});
      }
      kb.EmitTo(left, Op::kSub, Type::kU32, {left, step_units});
      kb.EmitTo(t, Op::kAdd, Type::kU32, {t, 1});
      kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, t, steps), *loop);
    }

    for (std::vector<Reg>& ac : acc) {
      for (Reg& a : ac) a = gen::WarpAllReduce(kb, a, gen::Reduce::kSum);
    }
    if (norm_in_loop) {
      for (Reg& q : sq) q = gen::WarpAllReduce(kb, q, gen::Reduce::kSum);
    }
    Reg first_slice = kb.Setp(Cmp::kEq, Type::kU32, lane, 0);
    if (split_log2 != 0) {
      // The slices' sums (and sums of squares) meet in shared memory; slice 0 adds them in
      // slice order (one column per warp: a split takes cols = 1).
      std::vector<Reg> sums = acc[0];
      if (norm_in_loop) sums.insert(sums.end(), sq.begin(), sq.end());
      const int ns = static_cast<int>(sums.size());
      const ptx::Symbol partials = kb.Shared("partials", int64_t{cfg.warps} * ns * 4);
      const Reg mine = kb.Emit(Op::kMadLo, Type::kU32, {warp, ns * 4, kb.AddressOf(partials)});
      {
        auto g = kb.If(first_slice);
        for (int i = 0; i < ns; ++i) {
          kb.St(Space::kShared, Type::kF32, Operand::Addr(mine, int64_t{i} * 4), {sums[i]});
        }
      }
      kb.BarSync();
      first_slice =
          kb.Emit(Op::kAnd, Type::kPred, {first_slice, kb.Setp(Cmp::kEq, Type::kU32, slice, 0)});
      auto g = kb.If(first_slice);
      for (int i = 0; i < ns; ++i) {
        for (int j = 1; j < cfg.split; ++j) {
          const Reg other =
              kb.Ld1(Space::kShared, Type::kF32, Operand::Addr(mine, (int64_t{j} * ns + i) * 4));
          kb.EmitTo(sums[i], Op::kAdd, Type::kF32, {sums[i], other});
        }
      }
    }
    for (int m = 0; m < static_cast<int>(sq.size()); ++m) {
      // x . (norm_w w) / sqrt(mean(x^2) + eps), the mean and rsqrt as rmsnorm takes them
      // (lanes that store nothing scale their partial sums too, unused).
      const Reg mean = gen::FFma(kb, sq[m], Operand::F32(1.0f / static_cast<float>(cfg.k)), eps);
      const Reg scale = kb.Emit(Op::kRsqrt, Type::kF32, {mean});
      for (std::vector<Reg>& ac : acc) ac[m] = gen::FMul(kb, ac[m], scale);
    }
    for (int c = 0; c < nc; ++c) {
      const Column& k = cols[c];
      Reg b;
      if (cfg.has_bias) {
        b = kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, bias, k.col, 4)));
      }
      const Reg lane0 = kb.Emit(Op::kAnd, Type::kPred, {k.ok, first_slice});
      for (int m = 0; m < mt; ++m) {
        const Reg r = gen::UAdd(kb, m0, m);
        const Reg store =
            kb.Emit(Op::kAnd, Type::kPred, {lane0, kb.Setp(Cmp::kLt, Type::kU32, r, m_rows)});
        auto g = kb.If(store);
        const Reg ya = gen::AddrAdd(kb, y, kb.Emit(Op::kMadLo, Type::kU32, {r, cfg.n, k.col}), 4);
        Reg v = acc[c][m];
        if (cfg.has_bias) v = gen::FAdd(kb, v, b);
        if (cfg.accumulate)
          v = gen::FAdd(kb, kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(ya)), v);
        kb.St(Space::kGlobal, Type::kF32, Operand::Addr(ya), {v});
      }
    }
    kb.Bind(done);
    kb.Ret();
    return absl::StrCat("GEMV over ", BlockFormatName(cfg.format), " blocks, staged ",
                        kStepUnits * kQuantLaneElems, " elements per warp, column and step");
  });
}

}  // namespace ptxserve::kernels
