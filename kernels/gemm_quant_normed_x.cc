#include "kernels/gemm_quant_normed_x.h"

#include <optional>
#include <vector>

#include "kernels/generator.h"

namespace ptxserve::kernels::gen {

namespace {
// Budget of the staged rows: mt * K * 4 bytes.
constexpr int64_t kNormedXBytes = 16384;
}  // namespace

bool NormedX::Fits(const QuantGemmConfig& cfg) {
  return cfg.norm && int64_t{cfg.m_tile} * cfg.k * 4 <= kNormedXBytes;
}

// Rows of K f32, 16-byte chunk q of a row stored at chunk q ^ ((q >> 3) & 7), so that a
// warp's reads of its lanes' units (chunk i of 128-byte unit u per lane) spread over all
// banks: the lane's chunk i of unit u0 lies at chunk i ^ (u0 & 7) of it.
NormedX::NormedX(KernelBuilder& kb, const QuantGemmConfig& cfg, Reg lane, Reg slice, int64_t nu)
    : cfg_(cfg),
      xs_(kb.Shared("normed_x", int64_t{cfg.m_tile} * cfg.k * 4)),
      chunk_(kQuantLaneElems / 4) {
  const Reg u0 = cfg.split == 1 ? lane : kb.Emit(Op::kMadLo, Type::kU32, {slice, nu, lane});
  const Reg base = kb.Emit(Op::kMadLo, Type::kU32, {u0, kQuantLaneElems * 4, kb.AddressOf(xs_)});
  const Reg key = kb.Emit(Op::kAnd, Type::kB32, {u0, 7});
  for (int i = 0; i < static_cast<int>(chunk_.size()); ++i) {
    chunk_[i] = kb.Emit(Op::kMadLo, Type::kU32,
                        {i == 0 ? key : kb.Emit(Op::kXor, Type::kB32, {key, i}), 16, base});
  }
}

std::vector<Reg> NormedX::Stage(KernelBuilder& kb, const GemvParams& p, Reg m0, Reg last_row,
                                Reg tid, Reg lane, Reg warp) const {
  const QuantGemmConfig& cfg = cfg_;
  const int threads = cfg.Threads();
  const int64_t chunks = cfg.k / 4;
  const int64_t row_bytes = int64_t{cfg.k} * 4;
  const int rounds = static_cast<int>(CeilDiv(chunks, threads));
  // Thread t takes chunks t + threads * j, whose swizzle is (t >> 3) & 7 with bit 2 flipped
  // where threads / 8 * j is 4 mod 8 (an odd number of warps, odd j).
  const Reg key = kb.Emit(Op::kAnd, Type::kB32, {kb.Emit(Op::kShr, Type::kU32, {tid, 3}), 7});
  const Reg phys = kb.Emit(Op::kXor, Type::kB32, {tid, key});
  const Reg xs_base = kb.AddressOf(xs_);
  const Reg dst[2] = {
      kb.Emit(Op::kMadLo, Type::kU32, {phys, 16, xs_base}),
      kb.Emit(Op::kMadLo, Type::kU32, {kb.Emit(Op::kXor, Type::kB32, {phys, 4}), 16, xs_base})};
  std::vector<Reg> x_row(cfg.m_tile);
  for (int m = 0; m < cfg.m_tile; ++m) {
    const Reg r = kb.Emit(Op::kMin, Type::kU32, {UAdd(kb, m0, m), last_row});
    x_row[m] = AddrAdd(kb, AddrAdd(kb, p.x, r, row_bytes), tid, 16);
  }
  const Reg nw = AddrAdd(kb, p.norm_w, tid, 16);
  // Loads first, all of them, so that one latency covers them.
  auto in_range = [&](int j) -> std::optional<Reg> {
    if (int64_t{threads} * (j + 1) <= chunks) return std::nullopt;
    return kb.Setp(Cmp::kLt, Type::kU32, tid, chunks - int64_t{threads} * j);
  };
  std::vector<std::optional<Reg>> ok(rounds);
  std::vector<std::vector<Reg>> nwv(rounds), xv(rounds * cfg.m_tile);
  for (int j = 0; j < rounds; ++j) {
    ok[j] = in_range(j);
    std::optional<KernelBuilder::ScopedGuard> g;
    if (ok[j]) g.emplace(&kb, *ok[j], false);
    const int64_t off = int64_t{threads} * j * 16;
    nwv[j] = kb.Ld(Space::kGlobal, Type::kF32, Operand::Addr(nw, off), 4);
    for (int m = 0; m < cfg.m_tile; ++m) {
      xv[j * cfg.m_tile + m] = kb.Ld(Space::kGlobal, Type::kF32, Operand::Addr(x_row[m], off), 4);
    }
  }
  std::vector<Reg> sq(cfg.m_tile);
  for (Reg& q : sq) q = kb.Mov(Type::kF32, Operand::F32(0.0f));
  for (int j = 0; j < rounds; ++j) {
    std::optional<KernelBuilder::ScopedGuard> g;
    if (ok[j]) g.emplace(&kb, *ok[j], false);
    const bool flip = int64_t{threads} / 8 * j % 8 == 4;
    for (int m = 0; m < cfg.m_tile; ++m) {
      const std::vector<Reg>& v = xv[j * cfg.m_tile + m];
      std::vector<Reg> xn(4);
      for (int e = 0; e < 4; ++e) {
        kb.EmitTo(sq[m], Op::kFma, Type::kF32, {v[e], v[e], sq[m]});
        xn[e] = FMul(kb, v[e], nwv[j][e]);
      }
      kb.St(Space::kShared, Type::kF32,
            Operand::Addr(dst[flip ? 1 : 0], int64_t{threads} * j * 16 + m * row_bytes), xn);
    }
  }
  // The warps' sums meet in shared memory, added in warp order by every thread.
  const ptx::Symbol sums = kb.Shared("norm_sums", int64_t{cfg.warps} * cfg.m_tile * 4, 4);
  const Reg sums_base = kb.AddressOf(sums);
  for (Reg& q : sq) q = WarpReduceToLane0(kb, q, Reduce::kSum);
  {
    auto g = kb.If(kb.Setp(Cmp::kEq, Type::kU32, lane, 0));
    const Reg mine = kb.Emit(Op::kMadLo, Type::kU32, {warp, cfg.m_tile * 4, sums_base});
    for (int m = 0; m < cfg.m_tile; ++m) {
      kb.St(Space::kShared, Type::kF32, Operand::Addr(mine, int64_t{m} * 4), {sq[m]});
    }
  }
  kb.BarSync();  // the sums and the staged rows are visible to every thread
  for (int m = 0; m < cfg.m_tile; ++m) {
    sq[m] = kb.Ld1(Space::kShared, Type::kF32, Operand::Addr(sums_base, int64_t{m} * 4));
    for (int w = 1; w < cfg.warps; ++w) {
      const Reg other = kb.Ld1(Space::kShared, Type::kF32,
                               Operand::Addr(sums_base, (int64_t{w} * cfg.m_tile + m) * 4));
      kb.EmitTo(sq[m], Op::kAdd, Type::kF32, {sq[m], other});
    }
  }
  return sq;
}

std::vector<Reg> NormedX::Load(KernelBuilder& kb, int m, int64_t off) const {
  std::vector<Reg> x;
  for (const Reg& c : chunk_) {
    const std::vector<Reg> v =
        kb.Ld(Space::kShared, Type::kF32, Operand::Addr(c, off + m * int64_t{cfg_.k} * 4), 4);
    x.insert(x.end(), v.begin(), v.end());
  }
  return x;
}

void NormedX::Advance(KernelBuilder& kb, int64_t bytes) {
  for (Reg& c : chunk_) kb.EmitTo(c, Op::kAdd, Type::kU32, {c, bytes});
}

}  // namespace ptxserve::kernels::gen
