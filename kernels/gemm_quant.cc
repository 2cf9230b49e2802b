#include "kernels/gemm_quant.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

// Blocks a warp stages per step, two per lane: a q8_0 step is 2176 bytes (137 16-byte
// units at most with the row's misalignment), so a lane keeps 5 loads in flight.
constexpr int kStepBlocks = 64;
constexpr int kUnitBytes = 16;

// One block decoded from its staging in shared memory at `blk` (2-byte aligned): its scale
// d and its 32 codes as f32 (q for q8_0, nibble - 8 for q4_0), so its weights are d * code.
struct Block {
  Reg d;
  std::vector<Reg> codes;
};
Block DecodeBlock(KernelBuilder& kb, BlockFormat f, Reg blk) {
  Block b;
  b.d = kb.Cvt(Type::kF32, Type::kF16, kb.Ld1(Space::kShared, Type::kB16, Operand::Addr(blk, 0)));
  b.codes.resize(kQuantBlockElems);
  // Two code bytes per load: the only width the blocks' 2-byte alignment allows.
  auto word = [&](int i) {
    const Reg h = kb.Ld1(Space::kShared, Type::kU16, Operand::Addr(blk, 2 + 2 * i));
    return kb.Cvt(Type::kU32, Type::kU16, h);
  };
  if (f == BlockFormat::kQ8_0) {
    for (int i = 0; i < kQuantBlockElems / 2; ++i) {
      const Reg v = word(i);
      for (int byte = 0; byte < 2; ++byte) {
        const Reg q = kb.Emit(Op::kBfe, Type::kS32, {v, 8 * byte, 8});  // sign-extended
        b.codes[2 * i + byte] = kb.Cvt(Type::kF32, Type::kS32, q, ptx::Round::kRn);
      }
    }
    return b;
  }
  for (int i = 0; i < kQuantBlockElems / 4; ++i) {
    const Reg v = word(i);  // bytes 2i (bits 0..7) and 2i + 1 (bits 8..15)
    for (int byte = 0; byte < 2; ++byte) {
      for (int hi = 0; hi < 2; ++hi) {
        const Reg q = kb.Emit(Op::kBfe, Type::kU32, {v, 8 * byte + 4 * hi, 4});
        const Reg qf = kb.Cvt(Type::kF32, Type::kU32, q, ptx::Round::kRn);
        b.codes[2 * i + byte + 16 * hi] = gen::FAdd(kb, qf, Operand::F32(-8.0f));
      }
    }
  }
  return b;
}

}  // namespace

absl::string_view BlockFormatName(BlockFormat f) {
  return f == BlockFormat::kQ8_0 ? "q8_0" : "q4_0";
}

bool ParseBlockFormat(absl::string_view s, BlockFormat* out) {
  for (BlockFormat f : {BlockFormat::kQ8_0, BlockFormat::kQ4_0}) {
    if (s == BlockFormatName(f)) {
      *out = f;
      return true;
    }
  }
  return false;
}

LaunchDims QuantGemmLaunch(const QuantGemmConfig& cfg, int64_t m) {
  LaunchDims d;
  d.grid = {static_cast<uint32_t>(CeilDiv(cfg.n, cfg.warps)),
            static_cast<uint32_t>(std::max<int64_t>(CeilDiv(m, cfg.m_tile), 1)), 1};
  d.block = {static_cast<uint32_t>(cfg.Threads()), 1, 1};
  return d;
}

QuantGemmConfig QuantGemmConfigFor(QuantGemmConfig base, int64_t m) {
  base.m_tile = static_cast<int>(std::clamp<int64_t>(m, 1, 8));
  return base;
}

absl::StatusOr<std::string> GenerateQuantGemm(const QuantGemmConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) -> std::string {
    const int bb = BlockBytes(cfg.format);
    const int64_t nb = cfg.k / kQuantBlockElems;  // blocks per row
    const int64_t row_bytes = nb * bb;
    const int64_t steps = CeilDiv(nb, kStepBlocks);
    const int64_t step_bytes = int64_t{kStepBlocks} * bb;  // a multiple of 16
    // Units a step may need: its bytes plus the row's misalignment (at most 14, even).
    const int units =
        static_cast<int>(CeilDiv(14 + std::min<int64_t>(nb, kStepBlocks) * bb, kUnitBytes));
    const int rounds = static_cast<int>(CeilDiv(units, 32));
    const int mt = cfg.m_tile;

    const auto [x, w, bias, y, m_rows] =
        cfg.has_bias ? DeclareParams<GemmArgs>(kb) : DeclareParams<GemmArgs>(kb, {&GemmArgs::bias});
    const ptx::Symbol stage = kb.Shared("blocks", int64_t{cfg.warps} * rounds * 32 * kUnitBytes);

    // Every warp runs every step: the steps share bar.sync, so a warp past the last column
    // works on column n - 1 and stores nothing. Only whole CTAs leave early (rows past M).
    const ptx::Label done = kb.NewLabel("done");
    const Reg tid = kb.Special(SReg::kTidX);
    const Reg lane = kb.Emit(Op::kAnd, Type::kB32, {tid, 31});
    const Reg warp = kb.Emit(Op::kShr, Type::kU32, {tid, 5});
    const Reg col_raw =
        kb.Emit(Op::kMadLo, Type::kU32, {kb.Special(SReg::kCtaidX), cfg.warps, warp});
    const Reg col_ok = kb.Setp(Cmp::kLt, Type::kU32, col_raw, cfg.n);
    const Reg col = kb.Emit(Op::kMin, Type::kU32, {col_raw, cfg.n - 1});
    const Reg m0 = kb.Emit(Op::kMulLo, Type::kU32, {kb.Special(SReg::kCtaidY), mt});
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, m0, m_rows), done);
    const Reg last_row = kb.Emit(Op::kSub, Type::kU32, {m_rows, 1});

    // The row's blocks start `head` bytes into the aligned unit that holds their first byte.
    const Reg row = gen::AddrAdd(kb, w, col, row_bytes);
    const Reg head = kb.Emit(Op::kAnd, Type::kB32, {kb.Cvt(Type::kU32, Type::kU64, row), 15});
    const Reg aligned = kb.Emit(Op::kAnd, Type::kB64, {row, static_cast<int64_t>(~uint64_t{15})});
    const Reg src = aligned;  // the step's first unit
    const Reg region =
        kb.Emit(Op::kMadLo, Type::kU32, {warp, rounds * 32 * kUnitBytes, kb.AddressOf(stage)});
    const Reg dst = kb.Emit(Op::kMadLo, Type::kU32, {lane, kUnitBytes, region});
    // Lane's blocks in a step: `lane` and 32 + lane, at head + j * bb in the staging.
    const Reg blk0 = kb.Emit(Op::kMadLo, Type::kU32, {lane, bb, gen::UAdd(kb, region, head)});
    // x of block `lane` of the step, for each row of the tile; rows past M read the last
    // row (valid memory) and are never stored.
    std::vector<Reg> x_lane(mt);
    for (int m = 0; m < mt; ++m) {
      const Reg r = kb.Emit(Op::kMin, Type::kU32, {gen::UAdd(kb, m0, m), last_row});
      x_lane[m] = gen::AddrAdd(kb, gen::AddrAdd(kb, x, r, int64_t{cfg.k} * 4), lane,
                               int64_t{kQuantBlockElems} * 4);
    }
    std::vector<Reg> acc(mt);
    for (Reg& a : acc) a = kb.Mov(Type::kF32, Operand::F32(0.0f));

    const Reg left = kb.Mov(Type::kU32, static_cast<int64_t>(nb));  // blocks not yet read
    const Reg t = kb.Mov(Type::kU32, 0);
    const ptx::Label loop = kb.NewLabel("step");
    kb.Bind(loop);
    const Reg step_blocks = kb.Emit(Op::kMin, Type::kU32, {left, kStepBlocks});
    const Reg needed = kb.Emit(
        Op::kShr, Type::kU32,
        {kb.Emit(Op::kMadLo, Type::kU32, {step_blocks, bb, gen::UAdd(kb, head, kUnitBytes - 1)}),
         4});
    // Lanes past the step's last unit load that unit again (a sector the warp reads anyway),
    // so every lane loads and stores unguarded.
    const Reg last_unit = kb.Emit(Op::kSub, Type::kU32, {needed, 1});
    std::vector<std::vector<Reg>> unit(rounds);
    for (int r = 0; r < rounds; ++r) {
      const Reg u = kb.Emit(Op::kMin, Type::kU32, {gen::UAdd(kb, lane, 32 * r), last_unit});
      unit[r] = kb.Ld(Space::kGlobal, Type::kB32, Operand::Addr(gen::AddrAdd(kb, src, u, 16)), 4,
                      ptx::CacheOp::kNonCoherent);
    }
    kb.BarSync();  // the previous step's blocks are decoded: the staging may be refilled
    for (int r = 0; r < rounds; ++r) {
      kb.St(Space::kShared, Type::kB32, Operand::Addr(dst, int64_t{r} * 32 * kUnitBytes), unit[r]);
    }
    kb.BarSync();  // this step's units are visible to every lane
    for (int p = 0; p < kStepBlocks / 32; ++p) {
      // A branch, not a guard: ptxas (13.0) spills this block to local memory when it is
      // guarded and the step loop repeats.
      const ptx::Label skip = kb.NewLabel("skip");
      kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, gen::UAdd(kb, lane, 32 * p), step_blocks), skip);
      const Reg blk = gen::UAdd(kb, blk0, 32 * p * bb);
      const Block block = DecodeBlock(kb, cfg.format, blk);
      for (int m = 0; m < mt; ++m) {
        const std::vector<Reg> xv =
            gen::LoadAsF32(kb, ElemType::kF32, x_lane[m], int64_t{32} * p * kQuantBlockElems * 4,
                           kQuantBlockElems, 16);
        // The scale applies once per block and row: acc += d * (x . codes).
        const Reg dot = gen::FMul(kb, xv[0], block.codes[0]);
        for (int e = 1; e < kQuantBlockElems; ++e)
          kb.EmitTo(dot, Op::kFma, Type::kF32, {xv[e], block.codes[e], dot});
        kb.EmitTo(acc[m], Op::kFma, Type::kF32, {block.d, dot, acc[m]});
      }
      kb.Bind(skip);
    }
    kb.EmitTo(src, Op::kAdd, Type::kU64, {src, step_bytes});
    for (Reg& xa : x_lane)
      kb.EmitTo(xa, Op::kAdd, Type::kU64, {xa, int64_t{kStepBlocks} * kQuantBlockElems * 4});
    kb.EmitTo(left, Op::kSub, Type::kU32, {left, step_blocks});
    kb.EmitTo(t, Op::kAdd, Type::kU32, {t, 1});
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, t, steps), loop);

    for (Reg& a : acc) a = gen::WarpAllReduce(kb, a, gen::Reduce::kSum);
    Reg b;
    if (cfg.has_bias) {
      b = kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, bias, col, 4)));
    }
    const Reg lane0 =
        kb.Emit(Op::kAnd, Type::kPred, {col_ok, kb.Setp(Cmp::kEq, Type::kU32, lane, 0)});
    for (int m = 0; m < mt; ++m) {
      const Reg r = gen::UAdd(kb, m0, m);
      const Reg store =
          kb.Emit(Op::kAnd, Type::kPred, {lane0, kb.Setp(Cmp::kLt, Type::kU32, r, m_rows)});
      auto g = kb.If(store);
      const Reg ya = gen::AddrAdd(kb, y, kb.Emit(Op::kMadLo, Type::kU32, {r, cfg.n, col}), 4);
      Reg v = acc[m];
      if (cfg.has_bias) v = gen::FAdd(kb, v, b);
      if (cfg.accumulate)
        v = gen::FAdd(kb, kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(ya)), v);
      kb.St(Space::kGlobal, Type::kF32, Operand::Addr(ya), {v});
    }
    kb.Bind(done);
    kb.Ret();
    return absl::StrCat("GEMV over ", BlockFormatName(cfg.format), " blocks, staged ", kStepBlocks,
                        " blocks per warp and step");
  });
}

}  // namespace ptxserve::kernels
