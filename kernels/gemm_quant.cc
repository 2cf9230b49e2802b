#include "kernels/gemm_quant.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/gemm_quant_decode.h"
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

}  // namespace

namespace gen {

LaneUnit DecodeLaneUnit(KernelBuilder& kb, BlockFormat f, Reg blk, Reg codes, int64_t off) {
  LaneUnit u;
  u.codes.resize(kQuantLaneElems);
  if (f == BlockFormat::kFp8E4M3) {
    u.d = gen::FMul(kb, kb.Ld1(Space::kShared, Type::kF32, Operand::Addr(blk, off)),
                    Operand::F32(256.0f));
    for (int i = 0; i < kQuantLaneElems / 4; ++i) {
      const Reg w = kb.Ld1(Space::kShared, Type::kB32, Operand::Addr(blk, off + 4 + 4 * i));
      WidenCodePair(kb, E4M3PairToF16x2(kb, w, 8), u.codes, 4 * i, 4 * i + 2);
      WidenCodePair(kb, E4M3PairToF16x2(kb, w, 0), u.codes, 4 * i + 1, 4 * i + 3);
    }
    return u;
  }
  if (f == BlockFormat::kInt4G128) {
    // The header word: f16 s in bits 0..15, z in 16..23, a zero pad byte. The codes are
    // taken as f16 subnormals (a nibble q as bits is q 2^-24, z likewise), whose f16x2
    // difference (q - z) 2^-24 is exact, so d = 2^24 s (exact in f32).
    const Reg hdr = kb.Ld1(Space::kShared, Type::kB32, Operand::Addr(blk, off));
    u.d = gen::FMul(kb, kb.Cvt(Type::kF32, Type::kF16, kb.Unpack(hdr, Type::kB16)[0]),
                    Operand::F32(0x1p24f));
    const Reg z_hi = kb.Emit(Op::kAnd, Type::kB32, {hdr, 0x00FF0000});
    const Reg zz = kb.Emit(Op::kOr, Type::kB32, {z_hi, kb.Emit(Op::kShr, Type::kB32, {z_hi, 16})});
    for (int i = 0; i < kQuantLaneElems / 8; ++i) {
      // Nibble j of the word is element 8i + j: nibbles j and j + 4 share a pass.
      const Reg w = kb.Ld1(Space::kShared, Type::kB32, Operand::Addr(codes, off + 4 * i));
      for (int j = 0; j < 4; ++j) {
        const Reg t = j == 0 ? w : kb.Emit(Op::kShr, Type::kB32, {w, 4 * j});
        const Reg h = kb.Emit(Op::kAnd, Type::kB32, {t, 0x000F000F});
        WidenCodePair(kb, kb.Emit(Op::kSub, Type::kF16x2, {h, zz}), u.codes, 8 * i + j,
                      8 * i + j + 4);
      }
    }
    return u;
  }
  u.d = kb.Cvt(Type::kF32, Type::kF16, kb.Ld1(Space::kShared, Type::kB16, Operand::Addr(blk, off)));
  // Two code bytes per load: the only width the blocks' 2-byte alignment allows.
  auto word = [&](int i) {
    const Reg h = kb.Ld1(Space::kShared, Type::kU16, Operand::Addr(blk, off + 2 + 2 * i));
    return kb.Cvt(Type::kU32, Type::kU16, h);
  };
  if (f == BlockFormat::kQ8_0) {
    for (int i = 0; i < kQuantLaneElems / 2; ++i) {
      const Reg v = word(i);
      for (int byte = 0; byte < 2; ++byte) {
        const Reg q = kb.Emit(Op::kBfe, Type::kS32, {v, 8 * byte, 8});  // sign-extended
        u.codes[2 * i + byte] = kb.Cvt(Type::kF32, Type::kS32, q, ptx::Round::kRn);
      }
    }
    return u;
  }
  for (int i = 0; i < kQuantLaneElems / 4; ++i) {
    const Reg v = word(i);  // bytes 2i (bits 0..7) and 2i + 1 (bits 8..15)
    for (int byte = 0; byte < 2; ++byte) {
      for (int hi = 0; hi < 2; ++hi) {
        const Reg q = kb.Emit(Op::kBfe, Type::kU32, {v, 8 * byte + 4 * hi, 4});
        const Reg qf = kb.Cvt(Type::kF32, Type::kU32, q, ptx::Round::kRn);
        u.codes[2 * i + byte + 16 * hi] = gen::FAdd(kb, qf, Operand::F32(-8.0f));
      }
    }
  }
  return u;
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

    const auto [x, w, bias, y, m_rows] =
        cfg.has_bias ? DeclareParams<GemmArgs>(kb) : DeclareParams<GemmArgs>(kb, {&GemmArgs::bias});
    const ptx::Symbol stage = kb.Shared("blocks", int64_t{cfg.warps} * nc * region_bytes);

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
      Reg ok, col, head, src, dst, blk0, codes0;
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
      k.blk0 = kb.Emit(Op::kMadLo, Type::kU32,
                       {upb_log2 == 0 ? lane : kb.Emit(Op::kShr, Type::kU32, {lane, upb_log2}), bb,
                        gen::UAdd(kb, region, k.head)});
      // An int4_g128 lane's nibbles: quarter lane % 4 of its block, past the 4-byte header.
      k.codes0 = upb_log2 == 0
                     ? k.blk0
                     : kb.Emit(Op::kMadLo, Type::kU32,
                               {kb.Emit(Op::kAnd, Type::kB32, {lane, (1 << upb_log2) - 1}), 16,
                                gen::UAdd(kb, k.blk0, 4)});
    }
    // x of unit `lane` of the step, for each row of the tile; rows past M read the last
    // row (valid memory) and are never stored.
    std::vector<Reg> x_lane(mt);
    for (int m = 0; m < mt; ++m) {
      const Reg r = kb.Emit(Op::kMin, Type::kU32, {gen::UAdd(kb, m0, m), last_row});
      Reg xr = gen::AddrAdd(kb, x, r, int64_t{cfg.k} * 4);
      if (split_log2 != 0) xr = gen::AddrAdd(kb, xr, slice, nu * kQuantLaneElems * 4);
      x_lane[m] = gen::AddrAdd(kb, xr, lane, int64_t{kQuantLaneElems} * 4);
    }
    std::vector<std::vector<Reg>> acc(nc, std::vector<Reg>(mt));
    for (std::vector<Reg>& ac : acc) {
      for (Reg& a : ac) a = kb.Mov(Type::kF32, Operand::F32(0.0f));
    }

    const Reg left = kb.Mov(Type::kU32, static_cast<int64_t>(nu));  // units not yet read
    const Reg t = kb.Mov(Type::kU32, 0);
    const ptx::Label loop = kb.NewLabel("step");
    kb.Bind(loop);
    const Reg step_units = kb.Emit(Op::kMin, Type::kU32, {left, kStepUnits});
    const Reg step_blocks =
        upb_log2 == 0 ? step_units : kb.Emit(Op::kShr, Type::kU32, {step_units, upb_log2});
    std::vector<std::vector<Reg>> unit;
    for (const Column& k : cols) {
      const Reg needed = kb.Emit(Op::kShr, Type::kU32,
                                 {kb.Emit(Op::kMadLo, Type::kU32,
                                          {step_blocks, bb, gen::UAdd(kb, k.head, kUnitBytes - 1)}),
                                  4});
      // Lanes past the step's last unit load that unit again (a sector the warp reads
      // anyway), so every lane loads and stores unguarded.
      const Reg last_unit = kb.Emit(Op::kSub, Type::kU32, {needed, 1});
      for (int r = 0; r < rounds; ++r) {
        const Reg u =
            kb.Emit(Op::kMin, Type::kU32, {r == 0 ? lane : gen::UAdd(kb, lane, 32 * r), last_unit});
        unit.push_back(kb.Ld(Space::kGlobal, Type::kB32,
                             Operand::Addr(gen::AddrAdd(kb, k.src, u, 16)), 4,
                             ptx::CacheOp::kNonCoherent));
      }
    }
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
      const ptx::Label skip = kb.NewLabel("skip");
      kb.BraIf(
          kb.Setp(Cmp::kGe, Type::kU32, p == 0 ? lane : gen::UAdd(kb, lane, 32 * p), step_units),
          skip);
      // x is loaded once for the warp's columns.
      std::vector<std::vector<Reg>> xv(mt);
      for (int c = 0; c < nc; ++c) {
        const gen::LaneUnit block = gen::DecodeLaneUnit(
            kb, cfg.format, cols[c].blk0, cols[c].codes0, int64_t{32 * p >> upb_log2} * bb);
        for (int m = 0; m < mt; ++m) {
          if (c == 0) {
            xv[m] = gen::LoadAsF32(kb, ElemType::kF32, x_lane[m],
                                   int64_t{32} * p * kQuantLaneElems * 4, kQuantLaneElems, 16);
          }
          // The scale applies once per lane unit and row: acc += d * (x . codes).
          const Reg dot = gen::FMul(kb, xv[m][0], block.codes[0]);
          for (int e = 1; e < kQuantLaneElems; ++e)
            kb.EmitTo(dot, Op::kFma, Type::kF32, {xv[m][e], block.codes[e], dot});
          kb.EmitTo(acc[c][m], Op::kFma, Type::kF32, {block.d, dot, acc[c][m]});
        }
      }
      kb.Bind(skip);
    }
    for (const Column& k : cols) kb.EmitTo(k.src, Op::kAdd, Type::kU64, {k.src, step_bytes});
    for (Reg& xa : x_lane)
      kb.EmitTo(xa, Op::kAdd, Type::kU64, {xa, int64_t{kStepUnits} * kQuantLaneElems * 4});
    kb.EmitTo(left, Op::kSub, Type::kU32, {left, step_units});
    kb.EmitTo(t, Op::kAdd, Type::kU32, {t, 1});
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, t, steps), loop);

    for (std::vector<Reg>& ac : acc) {
      for (Reg& a : ac) a = gen::WarpAllReduce(kb, a, gen::Reduce::kSum);
    }
    Reg first_slice = kb.Setp(Cmp::kEq, Type::kU32, lane, 0);
    if (split_log2 != 0) {
      // The slices' sums meet in shared memory; slice 0 adds them in slice order (one
      // column per warp: a split takes cols = 1).
      const ptx::Symbol partials = kb.Shared("partials", int64_t{cfg.warps} * mt * 4);
      const Reg mine = kb.Emit(Op::kMadLo, Type::kU32, {warp, mt * 4, kb.AddressOf(partials)});
      {
        auto g = kb.If(first_slice);
        for (int m = 0; m < mt; ++m) {
          kb.St(Space::kShared, Type::kF32, Operand::Addr(mine, int64_t{m} * 4), {acc[0][m]});
        }
      }
      kb.BarSync();
      first_slice =
          kb.Emit(Op::kAnd, Type::kPred, {first_slice, kb.Setp(Cmp::kEq, Type::kU32, slice, 0)});
      auto g = kb.If(first_slice);
      for (int m = 0; m < mt; ++m) {
        for (int j = 1; j < cfg.split; ++j) {
          const Reg other =
              kb.Ld1(Space::kShared, Type::kF32, Operand::Addr(mine, (int64_t{j} * mt + m) * 4));
          kb.EmitTo(acc[0][m], Op::kAdd, Type::kF32, {acc[0][m], other});
        }
      }
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
