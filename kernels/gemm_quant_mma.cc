// The tensor-core form of the quantized linear layer (QuantGemmConfig::tensor_cores): the f16
// tensor-core GEMM of gemm_mma.cc (its warp layout, ldmatrix fragments, mma pipeline and
// epilogue, through gen::GemmMma) with the weight tiles coming from the blocks.
//
// Each k step of 32 covers one block per weight row (a quarter of an int4_g128 block). A
// thread owns a row of the CTA's weight tile: it copies the aligned 16-byte units that hold
// the row's block for the step by cp.async into its own staging (rows are only 2- or
// 4-byte aligned; a q8_0 or fp8 block spans 3 units wherever it starts, q4_0 2, an
// int4_g128 quarter 1 for its header and 2 for its codes), stages - 1 steps ahead, and
// before the step's barrier reads its units back whole (16-byte loads), decodes the block
// from their words (gemm_quant_decode.h; the copy of the decode for the block's word offset)
// and writes its 32 weights as f16 into GemmMma's ldmatrix-ready tile. A thread reads back only its
// own copies, so the staging needs no barrier.
//
// Bank conflicts: a thread's units lie 48 bytes (3 units, 12 words) from its neighbour's,
// so the 8 lanes of each quarter of a warp read 16-byte slots 12 l mod 32 words = 0, 12,
// 24, 4, 16, 28, 8, 20: every bank once, the 4 wavefronts a warp's 512 bytes need. Word
// reads at the block's offset (the same in every lane where the rows share an alignment)
// would hit 8 of the 32 banks, 4 lanes each, whatever the stride: units start 16-byte
// aligned, so a word's bank is one of 8 for a given offset in its unit.
//
// Rounding: each weight d * code is exact in f32 (q8_0, q4_0, int4_g128: an f16 scale times
// a code of at most 8 bits; fp8: the f32 scale times an E4M3 value rounded once to f32)
// and is rounded once to f16 (u = 2^-11 relative, fp8's product 2^-11 + 2^-24), as the
// activations are; the products add in f32. So |y - y_exact| <= (2 u + u^2) sum_k |x_k w_k|
// plus f32 sums, the f16 tensor-core form's bound (gemm_mma_test) with the weights' rounding
// beside the activations'. Weights beyond f16's range (|d * code| > 65504) would not fit:
// the formats' scales come from weights that do. fp8 weights go through the same f16 mma,
// not sm_89/sm_90's e4m3 mma: every E4M3 value is an f16, and the e4m3 mma would need the
// activations rounded to E4M3 too (3 bits of mantissa against f16's 10), which the f16
// path avoids at the same tensor rate per byte of weights read (sm_80 runs the same text).
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/gemm_mma_source.h"
#include "kernels/gemm_quant.h"
#include "kernels/gemm_quant_decode.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {
namespace {

constexpr int kStepK = 32;  // k per step: one block of 32, a quarter of an int4_g128 block

// Aligned 16-byte units a thread stages per row and step (see the header comment): room for
// 3, q4_0's 2 at the same stride, which keeps the reads conflict-free.
constexpr int kUnitsPerStep = 3;
int UnitsCopied(BlockFormat f) { return f == BlockFormat::kQ4_0 ? 2 : 3; }

// A row's block of a step from the thread's units in registers (`units`: their words), the
// block `word` words into them (int4_g128: its header; its codes start a word further, mod 4,
// in units 1 and 2, since a quarter's codes lie 4 + 16 i bytes past the header). `at`: the
// block's byte offset, for the 2-byte formats' half-word.
class UnitsReader : public gen::BlockReader {
 public:
  UnitsReader(KernelBuilder& kb, BlockFormat f, const std::vector<Reg>& units, int word, Reg at)
      : f_(f) {
    auto from = [&](int first, int count) {
      return std::vector<Reg>(units.begin() + first, units.begin() + first + count);
    };
    switch (f) {
      case BlockFormat::kFp8E4M3:  // 4-byte aligned: the scale word, then 8 code words
        words_ = from(word, 9);
        return;
      case BlockFormat::kInt4G128:
        words_ = from(word, 1);
        codes_ = from(4 + (word + 1) % 4, 4);
        return;
      case BlockFormat::kQ8_0:
      case BlockFormat::kQ4_0:
        break;
    }
    // 2-byte aligned: the words from the aligned one at or below the block, and the prmt
    // selector of bytes r + 2.. of a word pair, r = at mod 4 (0 or 2): code unit i.
    words_ = from(word, f == BlockFormat::kQ8_0 ? 9 : 5);
    sel_ =
        kb.Emit(Op::kMadLo, Type::kU32, {kb.Emit(Op::kAnd, Type::kB32, {at, 3}), 0x1111, 0x5432});
  }
  Reg Scale(KernelBuilder& kb) override {
    switch (f_) {
      case BlockFormat::kFp8E4M3:
        return kb.Mov(Type::kF32, words_[0]);
      case BlockFormat::kInt4G128:
        return words_[0];
      case BlockFormat::kQ8_0:
      case BlockFormat::kQ4_0:
        break;
    }
    // Bytes r, r + 1 of the first word.
    const Reg sel = kb.Emit(Op::kSub, Type::kU32, {sel_, 0x2222});
    return kb.Unpack(kb.Emit(Op::kPrmt, Type::kB32, {words_[0], words_[0], sel}), Type::kB16)[0];
  }
  Reg CodeUnit(KernelBuilder& kb, int i) override {
    switch (f_) {
      case BlockFormat::kFp8E4M3:
        return words_[1 + i];
      case BlockFormat::kInt4G128:
        return codes_[i];
      case BlockFormat::kQ8_0:
      case BlockFormat::kQ4_0:
        break;
    }
    return kb.Emit(Op::kPrmt, Type::kB32, {words_[i], words_[i + 1], sel_});
  }

 private:
  BlockFormat f_;
  std::vector<Reg> words_, codes_;
  Reg sel_;
};

// Staging of `threads` threads, each owning rows tid + threads i of the bn-row tile.
struct Staging {
  Staging(const QuantGemmConfig& cfg, int threads)
      : slot_bytes(static_cast<int>(CeilDiv(cfg.tile_n, threads)) * threads * kUnitsPerStep * 16),
        bytes((cfg.stages - 1) * slot_bytes) {}
  int slot_bytes;  // one step's units of every row
  int bytes;       // stages - 1 steps in flight
};

class BlockSource : public gen::MmaWeightSource {
 public:
  BlockSource(const QuantGemmConfig& cfg, int threads)
      : cfg_(cfg), threads_(threads), staging_(cfg, threads) {}
  int StagingBytes() const override { return staging_.bytes; }

  void Begin(KernelBuilder& kb, Reg w, Reg staging, Reg n0) override {
    const Reg tid = kb.Special(SReg::kTidX);
    const int64_t row_bytes = int64_t{cfg_.k} / BlockElems(cfg_.format) * BlockBytes(cfg_.format);
    const int unit_bytes = kUnitsPerStep * 16;
    for (int i = 0; i * threads_ < cfg_.tile_n; ++i) {
      Row r;
      r.tile_row = gen::UAdd(kb, tid, i * threads_);
      if ((i + 1) * threads_ > cfg_.tile_n) {
        r.past = kb.Setp(Cmp::kGe, Type::kU32, r.tile_row, cfg_.tile_n);
      }
      // Rows past N read row N - 1 (valid memory): they reach only outputs never stored.
      const Reg grow = kb.Emit(Op::kMin, Type::kU32, {gen::UAdd(kb, n0, r.tile_row), cfg_.n - 1});
      r.blocks = gen::AddrAdd(kb, w, grow, row_bytes);
      r.head = kb.Cvt(Type::kU32, Type::kU64, r.blocks);
      r.staging = kb.Emit(Op::kMadLo, Type::kU32,
                          {tid, unit_bytes, gen::UAdd(kb, staging, i * threads_ * unit_bytes)});
      rows_.push_back(r);
    }
  }

  void Copy(KernelBuilder& kb, Reg t) override {
    const Reg slot = Slot(kb, t);
    for (const Row& r : rows_) {
      const std::optional<ptx::Label> skip = SkipUnlessOwned(kb, r);
      const Reg dst = gen::UAdd(kb, r.staging, slot);
      // Unit u of the staging from `src` + `off`, all 16 bytes or `size` of them.
      auto unit = [&](int u, Reg src, int64_t off, const Operand& size = Operand()) {
        kb.CpAsync(ptx::CpAsyncCache::kCg, Operand::Addr(dst, int64_t{u} * 16),
                   Operand::Addr(src, off), 16, size);
      };
      if (cfg_.format != BlockFormat::kInt4G128) {
        const Reg base = AlignDown(kb, gen::AddrAdd(kb, r.blocks, t, BlockBytes(cfg_.format)));
        for (int u = 0; u < UnitsCopied(cfg_.format); ++u) unit(u, base, int64_t{u} * 16);
      } else {
        const auto [hdr, codes] = Int4Parts(kb, t);
        const Reg hdr_at = gen::AddrAdd(kb, r.blocks, hdr, 1);
        const Reg codes_at = gen::AddrAdd(kb, r.blocks, codes, 1);
        unit(0, AlignDown(kb, hdr_at), 0);
        const Reg codes_base = AlignDown(kb, codes_at);
        unit(1, codes_base, 0);
        // Codes 16-byte aligned lie in one unit; the next may be past the allocation.
        const Reg straddles = kb.Setp(Cmp::kNe, Type::kU32, Low4(kb, r.head, codes), 0);
        unit(2, codes_base, 16, kb.Selp(Type::kU32, 16, 0, straddles));
      }
      if (skip) kb.Bind(*skip);
    }
  }

  void Decode(KernelBuilder& kb, Reg t, Reg tile, int row_bytes) override {
    const Reg slot = Slot(kb, t);
    for (const Row& r : rows_) {
      const std::optional<ptx::Label> skip = SkipUnlessOwned(kb, r);
      const Reg st = gen::UAdd(kb, r.staging, slot);
      std::vector<Reg> units;
      for (int v = 0; v < UnitsCopied(cfg_.format); ++v) {
        const std::vector<Reg> q = kb.Ld(Space::kShared, Type::kB32, Operand::Addr(st, v * 16), 4);
        units.insert(units.end(), q.begin(), q.end());
      }
      const Reg at =
          cfg_.format != BlockFormat::kInt4G128
              ? Low4(kb, r.head, kb.Emit(Op::kMulLo, Type::kU32, {t, BlockBytes(cfg_.format)}))
              : Low4(kb, r.head, Int4Parts(kb, t).first);
      const Reg dst = kb.Emit(Op::kMadLo, Type::kU32, {r.tile_row, row_bytes, tile});
      // The block's first word in the units, at / 4, picks one of four copies of the decode,
      // each with its words known: a branch, where realigning the words in registers would
      // take two selp a word. It is warp-uniform wherever the rows' lengths are multiples of
      // 16 bytes (every row then starts where the first does).
      const Reg high = kb.Setp(Cmp::kGe, Type::kU32, at, 8);
      const Reg odd = kb.Setp(Cmp::kNe, Type::kU32, kb.Emit(Op::kAnd, Type::kB32, {at, 4}), 0);
      const ptx::Label words23 = kb.NewLabel("words23"), decoded = kb.NewLabel("decoded");
      kb.BraIf(high, words23);
      for (int word = 0; word < 4; ++word) {
        if (word == 2) kb.Bind(words23);
        std::optional<ptx::Label> next;  // the odd word's copy, after an even one's
        if (word % 2 == 0) {
          next = kb.NewLabel("odd_word");
          kb.BraIf(odd, *next);
        }
        UnitsReader reader(kb, cfg_.format, units, word, at);
        const gen::LaneUnit u = gen::DecodeBlock(kb, cfg_.format, reader);
        std::vector<Reg> packed;
        for (int e = 0; e < kStepK; e += 2) {
          packed.push_back(kb.CvtPack(Type::kF16x2, gen::FMul(kb, u.d, u.codes[e + 1]),
                                      gen::FMul(kb, u.d, u.codes[e])));
        }
        for (int q = 0; q < 4; ++q) {
          kb.St(Space::kShared, Type::kB32, Operand::Addr(dst, int64_t{q} * 16),
                std::vector<Reg>(packed.begin() + 4 * q, packed.begin() + 4 * q + 4));
        }
        if (word < 3) kb.Bra(decoded);
        if (next) kb.Bind(*next);
      }
      kb.Bind(decoded);
      if (skip) kb.Bind(*skip);
    }
  }

 private:
  struct Row {
    Reg tile_row;             // the row of the CTA's weight tile
    std::optional<Reg> past;  // the row is past the tile: the thread has none (unset: never)
    Reg blocks;               // global: the row's first block
    Reg head;                 // its address's low 32 bits
    Reg staging;              // shared: the thread's units of the row in slot 0
  };
  // A branch past the row's work when the thread has no such row (warp-uniform: whole warps
  // past the tile). A branch, not a guard: ptxas spills the guarded decode.
  static std::optional<ptx::Label> SkipUnlessOwned(KernelBuilder& kb, const Row& r) {
    if (!r.past) return std::nullopt;
    const ptx::Label skip = kb.NewLabel("no_row");
    kb.BraIf(*r.past, skip);
    return skip;
  }
  // Step t's staging slot offset: t mod (stages - 1).
  Reg Slot(KernelBuilder& kb, Reg t) const {
    if (cfg_.stages == 2) return kb.Mov(Type::kU32, 0);
    return kb.Emit(Op::kMulLo, Type::kU32,
                   {gen::RemConst(kb, t, cfg_.stages - 1), staging_.slot_bytes});
  }
  // int4_g128 step t's header and codes, in bytes from the row's first block.
  std::pair<Reg, Reg> Int4Parts(KernelBuilder& kb, Reg t) const {
    const Reg hdr = kb.Emit(Op::kMulLo, Type::kU32,
                            {kb.Emit(Op::kShr, Type::kU32, {t, 2}), BlockBytes(cfg_.format)});
    const Reg codes = kb.Emit(Op::kMadLo, Type::kU32,
                              {kb.Emit(Op::kAnd, Type::kB32, {t, 3}), 16, gen::UAdd(kb, hdr, 4)});
    return {hdr, codes};
  }
  // (head + off) mod 16: where a byte at `off` from the row's start lies in its unit.
  static Reg Low4(KernelBuilder& kb, Reg head, Reg off) {
    return kb.Emit(Op::kAnd, Type::kB32, {gen::UAdd(kb, head, off), 15});
  }
  static Reg AlignDown(KernelBuilder& kb, Reg p) {
    return kb.Emit(Op::kAnd, Type::kB64, {p, static_cast<int64_t>(~uint64_t{15})});
  }

  QuantGemmConfig cfg_;
  int threads_;
  Staging staging_;
  std::vector<Row> rows_;
};

}  // namespace

GemmConfig QuantMmaGemmConfig(const QuantGemmConfig& cfg) {
  GemmConfig g;
  g.n = cfg.n;
  g.k = cfg.k;
  g.weight_dtype = ElemType::kF16;
  g.has_bias = cfg.has_bias;
  g.accumulate = cfg.accumulate;
  g.tiled = true;
  g.tensor_cores = true;
  g.SetMmaTile({cfg.tile_m, cfg.tile_n, cfg.warps_m, cfg.warps_n, 1, cfg.stages});
  g.target = cfg.target;
  return g;
}

namespace {
int SharedBytes(const QuantGemmConfig& cfg) {
  const GemmConfig g = QuantMmaGemmConfig(cfg);
  return gen::GemmMmaSharedBytes(g, Staging(cfg, g.Threads()).bytes);
}
}  // namespace

absl::Status CheckQuantGemmMma(const QuantGemmConfig& cfg) {
  if (cfg.norm) {
    return absl::InvalidArgumentError(absl::StrCat(
        "qgemm config ", cfg.Key(), ": the tensor-core form has no fused RMSNorm (norm)"));
  }
  // The f16 form's checks of the tile, at two stages: the shared memory of its activation
  // stages and two weight stages, which this form has too (its staging comes on top).
  GemmConfig g = QuantMmaGemmConfig(cfg);
  g.stages = 2;
  if (absl::Status s = g.CheckAcrossFields(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("qgemm config ", cfg.Key(), ": ", s.message()));
  }
  const int limit = gen::MmaSharedLimitKiB(cfg.target) * 1024;
  if (SharedBytes(cfg) > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "qgemm config ", cfg.Key(), ": tensor-core tile ", cfg.tile_m, "x", cfg.tile_n, " in ",
        cfg.stages, " stages needs ", SharedBytes(cfg), " bytes of shared memory, more than sm_",
        cfg.target.sm, "'s ", limit / 1024, " KiB"));
  }
  return absl::OkStatus();
}

LaunchDims QuantGemmMmaLaunch(const QuantGemmConfig& cfg, int64_t m) {
  LaunchDims d = GemmLaunch(QuantMmaGemmConfig(cfg), m);
  d.shared_bytes = static_cast<uint32_t>(SharedBytes(cfg));
  return d;
}

QuantGemmConfig QuantGemmFormFor(QuantGemmConfig base, int64_t m, int sm_count) {
  const QuantGemmConfig gemv = QuantGemmConfigFor(base, m);
  const int64_t sms = std::max(sm_count, 1);
  // The GEMV while its 8-row tiles give at most 48 CTAs per SM: up to there its weights'
  // re-reads (from L2) cost less than a tensor-core CTA's chain of k steps.
  if (m < kQuantMmaMinRows || CeilDiv(base.n, base.warps) * CeilDiv(m, 8) <= 48 * sms) {
    return gemv;
  }
  // A CTA's time is its chain of k steps (each a barrier, its rows' decode and its mmas),
  // nearly the same for every tile, so the fewest waves of CTAs win: the largest tile that
  // the batch fills and that still gives every SM about two CTAs, else the smallest.
  constexpr GemmMmaTile kTiles[] = {{128, 256, 2, 4, 1, 3}, {128, 128, 2, 2, 1, 3},
                                    {64, 128, 2, 2, 1, 3},  {64, 64, 2, 2, 1, 3},
                                    {32, 64, 2, 2, 1, 3},   {16, 64, 1, 4, 1, 3}};
  QuantGemmConfig tc = base;
  tc.tensor_cores = true;
  for (const GemmMmaTile& t : kTiles) {
    tc.tile_m = t.bm;
    tc.tile_n = t.bn;
    tc.warps_m = t.wm;
    tc.warps_n = t.wn;
    tc.stages = t.stages;
    if (m >= t.bm && 10 * CeilDiv(base.n, t.bn) * CeilDiv(m, t.bm) >= 19 * sms) break;
  }
  return CheckQuantGemmMma(tc).ok() ? tc : gemv;
}

namespace gen {

std::string QuantGemmMma(KernelBuilder& kb, const QuantGemmConfig& cfg) {
  const GemmConfig g = QuantMmaGemmConfig(cfg);
  BlockSource source(cfg, g.Threads());
  const std::string notes = GemmMma(kb, g, &source);
  return absl::StrCat(notes, ", ", BlockFormatName(cfg.format),
                      " blocks staged by cp.async and dequantized to f16 in shared memory");
}

}  // namespace gen

}  // namespace ptxserve::kernels
