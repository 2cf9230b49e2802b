#include "kernels/gemm.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "kernels/gemm_mma_source.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

constexpr int kUnroll = 4;  // K chunks per loop trip: 128-bit loads in flight per lane
// From this many rows GemmConfigFor weighs the prefill tiles' waves (WeighedUs).
constexpr int64_t kPrefillRows = 512;

// Elements of K per lane load: up to 128 bits of weights, dividing K.
int Vec(const GemmConfig& c) {
  int v = 16 / ElemSize(c.weight_dtype);
  while (c.k % v != 0) v /= 2;
  return v;
}

}  // namespace

void GemmConfig::SetMmaTile(const GemmMmaTile& t) {
  tile_m = t.bm;
  tile_n = t.bn;
  warps_m = t.wm;
  warps_n = t.wn;
  warps_k = t.wk;
  stages = t.stages;
}

absl::Status GemmConfig::CheckAcrossFields() const {
  if (norm && tiled) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm config ", Key(), ": the fused RMSNorm is a GEMV form (not tiled)"));
  }
  if (x_dtype != ElemType::kF32 && (norm || (tensor_cores && x_dtype != weight_dtype))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm config ", Key(), ": x_dtype ", ElemTypeName(x_dtype),
        " is for unfused inputs, of the weights' type on tensor cores (the fused RMSNorm reads "
        "the f32 residual)"));
  }
  if (y_dtype != ElemType::kF32 && (!tensor_cores || accumulate || n % 2 != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm config ", Key(), ": y_dtype ", ElemTypeName(y_dtype),
                     " is for tensor-core forms that do not accumulate, with n even"));
  }
  if (swiglu && (!tensor_cores || has_bias || accumulate)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm config ", Key(),
                     ": swiglu is an epilogue of the tensor-core form, without bias or "
                     "accumulate"));
  }
  if (split_k > 1 && (!tensor_cores || warps_k != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm config ", Key(), ": split_k is for the tensor-core form with one k slice a warp"));
  }
  if (!tensor_cores) return absl::OkStatus();
  if (!tiled || weight_dtype == ElemType::kF32 || k % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm config ", Key(),
                     ": the tensor-core form is tiled and takes f16 or bf16 weights and k a "
                     "multiple of 8"));
  }
  const int warps = warps_m * warps_n * warps_k;
  const bool whole_blocks = (warps == 4 || warps == 8) && tile_m % (16 * warps_m) == 0 &&
                            tile_n % (16 * warps_n) == 0 &&
                            tile_m * 8 * warps_k % (32 * warps) == 0;
  if (!whole_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor-core tile ", tile_m, "x", tile_n, " as ", warps_m, "x", warps_n, "x", warps_k,
        " warps: want four or eight warps with tiles of whole 16x16 blocks and a whole number "
        "of activation float4 per thread"));
  }
  // Every k slice has steps: an empty one would multiply stale tiles.
  const int64_t steps = CeilDiv(k, 32 * warps_k);
  if (split_k > 1 && CeilDiv(steps, CeilDiv(steps, split_k)) != split_k) {
    return absl::InvalidArgumentError(absl::StrCat("gemm config ", Key(), ": ", steps,
                                                   " k steps do not split into ", split_k,
                                                   " slices of at least one step each"));
  }
  const int limit_kib = gen::MmaSharedLimitKiB(target);
  if (GemmMmaSharedBytes(*this) > limit_kib * 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-core tile ", tile_m, "x", tile_n, " in ", stages, " stages needs ",
                     GemmMmaSharedBytes(*this), " bytes of shared memory, more than sm_", target.sm,
                     "'s ", limit_kib, " KiB"));
  }
  return absl::OkStatus();
}

LaunchDims GemmLaunch(const GemmConfig& cfg, int64_t m) {
  // With swiglu a tile's bn weight rows are bn / 2 gate and bn / 2 up rows.
  const int tile_cols = cfg.tensor_cores ? cfg.tile_n / (cfg.swiglu ? 2 : 1) : 64;
  const int tile_rows = cfg.tensor_cores ? cfg.tile_m : 64;
  const int cols = cfg.tiled ? tile_cols : cfg.warps;   // output columns per CTA
  const int rows = cfg.tiled ? tile_rows : cfg.m_tile;  // rows per CTA
  LaunchDims d;
  d.grid = {static_cast<uint32_t>(CeilDiv(cfg.n, cols)),
            static_cast<uint32_t>(std::max<int64_t>(CeilDiv(m, rows), 1)),
            static_cast<uint32_t>(cfg.split_k)};
  d.block = {static_cast<uint32_t>(cfg.Threads()), 1, 1};
  if (cfg.tensor_cores) d.shared_bytes = static_cast<uint32_t>(GemmMmaSharedBytes(cfg));
  return d;
}

namespace {

// A prefill tile as GemmConfigFor weighs it, per k step of 32 on an h100 (fitted to the
// cost model's estimates of the Llama-3.2-1B projections at 1024 and 2048 rows, printed by
// gemm_mma_test): the CTAs an SM holds (registers and shared memory), the chain a warp
// cannot hide once per wave (latency), and the shared-memory wavefronts a CTA's step takes
// on its SM (the two limits that bind these tiles; the tensor pipes stay below both).
struct WeighedTile {
  GemmMmaTile tile;
  int resident;  // CTAs per SM
  double chain_us, shared_us;
};
constexpr WeighedTile kPrefillTiles[] = {
    {{128, 256, 2, 4, 1, 3}, 1, 0.33, 0.29},
    {kMmaLargeTile, 2, 0.33, 0.162},
    {{64, 128, 2, 2, 1, 3}, 3, 0.22, 0.113},
};
// The split-K reduction's DRAM traffic at an h100's sustained bandwidth, and its launch.
constexpr double kBytesPerUs = 3.0e6, kLaunchUs = 0.5;

// Estimated microseconds of `t` over m rows split `split_k` ways: full waves (not CTAs per
// SM: a grid one CTA past a wave pays a whole second wave) times the steps a slice runs,
// or the busiest SM's wavefronts when those bind; split, plus the partial sums written and
// the reduction launch (reading them and y when accumulating, writing y).
double WeighedUs(const GemmConfig& base, const WeighedTile& t, int64_t m, int split_k,
                 int64_t sms) {
  const int64_t ctas = CeilDiv(base.n, t.tile.bn) * CeilDiv(m, t.tile.bm) * split_k;
  const int64_t waves = CeilDiv(ctas, t.resident * sms);
  const double steps = static_cast<double>(CeilDiv(CeilDiv(base.k, 32), split_k));
  const double gemm = steps * std::max(static_cast<double>(waves) * t.chain_us,
                                       static_cast<double>(CeilDiv(ctas, sms)) * t.shared_us);
  if (split_k == 1) return gemm;
  const double outputs = static_cast<double>(m) * base.n * 4;  // bytes of y
  return gemm + kLaunchUs + outputs * (2.0 * split_k + (base.accumulate ? 1 : 0)) / kBytesPerUs;
}

}  // namespace

GemmConfig GemmConfigFor(GemmConfig base, int64_t m, int sm_count) {
  base.tiled = false;
  base.tensor_cores = false;
  base.split_k = 1;
  base.m_tile = static_cast<int>(std::clamp<int64_t>(m, 1, 8));
  const int64_t sms = std::max(sm_count, 1);
  if (m <= 8 || CeilDiv(base.n, base.warps) * CeilDiv(m, 8) <= 16 * sms) return base;
  base.tiled = true;
  if (base.weight_dtype == ElemType::kF32 || base.k % 8 != 0) return base;
  base.tensor_cores = true;
  auto ctas = [&](const GemmMmaTile& t) { return CeilDiv(base.n, t.bn) * CeilDiv(m, t.bm); };
  // Prefill (from 512 rows): the prefill tile and split of the fewest estimated
  // microseconds (WeighedUs), splits of at least 8 k steps a slice.
  if (m >= kPrefillRows) {
    double best = 0;
    for (const WeighedTile& t : kPrefillTiles) {
      for (int split = 1; split <= 4 && CeilDiv(base.k, 32) >= 8 * split; split *= 2) {
        const double us = WeighedUs(base, t, m, split, sms);
        if (best == 0 || us < best) {
          best = us;
          base.SetMmaTile(t.tile);
          base.split_k = split;
        }
      }
    }
    return base;
  }
  // Large tiles while the grid still gives every SM a few CTAs and the batch fills their
  // rows: 128x256 over eight warps from 3.5 per SM, 128x128 or 64x128 (64x64 warp parts,
  // three stages), then 64x64, from 1.9.
  constexpr GemmMmaTile kEightWarpTile{128, 256, 2, 4, 1, 3}, kHalfLargeTile{64, 128, 2, 2, 1, 3};
  constexpr GemmMmaTile kRowTile{16, 64, 1, 4, 1}, kWideRowTile{32, 64, 2, 2, 1};
  auto fits = [&](const GemmMmaTile& t, int ctas_per_sm_x10) {
    return m >= t.bm && 10 * ctas(t) >= ctas_per_sm_x10 * sms;
  };
  if (fits(kEightWarpTile, 35)) {
    base.SetMmaTile(kEightWarpTile);
  } else if (fits(kMmaLargeTile, 19)) {
    base.SetMmaTile(kMmaLargeTile);
  } else if (fits(kHalfLargeTile, 19)) {
    base.SetMmaTile(kHalfLargeTile);
  } else if (fits(kMmaWideTile, 19)) {
    base.SetMmaTile(kMmaWideTile);
  } else if (ctas(kMmaNarrowTile) <= 8 * sms) {
    base.SetMmaTile(kMmaNarrowTile);
  } else if (ctas(kRowTile) <= 8 * sms) {
    base.SetMmaTile(kRowTile);
  } else {
    base.SetMmaTile(kWideRowTile);
  }
  return base;
}

namespace gen {

ParamRegs<GemmArgs> DeclareGemmParams(KernelBuilder& kb, const GemmConfig& cfg) {
  // Without a bias the bias pointer is never read.
  return cfg.has_bias ? DeclareParams<GemmArgs>(kb)
                      : DeclareParams<GemmArgs>(kb, {&GemmArgs::bias});
}

GemvParams DeclareGemvParams(KernelBuilder& kb, bool norm, bool has_bias) {
  GemvParams p;
  if (norm) {
    const auto [x, norm_w, w, bias, y, m_rows, eps] =
        has_bias ? DeclareParams<NormGemmArgs>(kb)
                 : DeclareParams<NormGemmArgs>(kb, {&NormGemmArgs::bias});
    p = {x, norm_w, w, bias, y, m_rows, eps};
  } else {
    const auto [x, w, bias, y, m_rows] =
        has_bias ? DeclareParams<GemmArgs>(kb) : DeclareParams<GemmArgs>(kb, {&GemmArgs::bias});
    p.x = x, p.w = w, p.bias = bias, p.y = y, p.m_rows = m_rows;
  }
  return p;
}

}  // namespace gen

absl::StatusOr<std::string> GenerateGemm(const GemmConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) -> std::string {
    if (cfg.tensor_cores) return gen::GemmMma(kb, cfg);
    if (cfg.tiled) return gen::GemmTiled(kb, cfg);
    const int ve = Vec(cfg);
    const int es = ElemSize(cfg.weight_dtype);
    const int xs = ElemSize(cfg.x_dtype);
    const int mt = cfg.m_tile;
    const int64_t chunk = int64_t{32} * ve;  // K elements per warp-wide load
    const int64_t full = cfg.k / chunk;
    const int64_t rem = cfg.k % chunk;  // a multiple of ve

    // The fused RMSNorm's parameters (norm_w, eps) are declared only with GemmConfig::norm.
    const gen::GemvParams params = gen::DeclareGemvParams(kb, cfg.norm, cfg.has_bias);
    const Reg x = params.x, norm_w = params.norm_w, w = params.w, bias = params.bias, y = params.y,
              m_rows = params.m_rows, eps = params.eps;
    const bool dependent = cfg.GridDependent();
    if (dependent) kb.GridDepLaunchDependents();

    // No barriers: a warp past the last column leaves as a whole.
    const ptx::Label done = kb.NewLabel("done");
    const Reg tid = kb.Special(SReg::kTidX);
    const Reg lane = kb.Emit(Op::kAnd, Type::kB32, {tid, 31});
    const Reg warp = kb.Emit(Op::kShr, Type::kU32, {tid, 5});
    const Reg col = kb.Emit(Op::kMadLo, Type::kU32, {kb.Special(SReg::kCtaidX), cfg.warps, warp});
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, col, cfg.n), done);
    const Reg m0 = kb.Emit(Op::kMulLo, Type::kU32, {kb.Special(SReg::kCtaidY), mt});
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, m0, m_rows), done);
    const Reg last_row = kb.Emit(Op::kSub, Type::kU32, {m_rows, 1});

    // Lane's first element: w[col][lane * ve], x[row][lane * ve]. Rows past M read the
    // last row instead (valid memory) and are never stored.
    const Reg w_lane =
        gen::AddrAdd(kb, gen::AddrAdd(kb, w, col, int64_t{cfg.k} * es), lane, int64_t{ve} * es);
    std::vector<Reg> x_lane(mt);
    for (int m = 0; m < mt; ++m) {
      const Reg row = kb.Emit(Op::kMin, Type::kU32, {gen::UAdd(kb, m0, m), last_row});
      x_lane[m] =
          gen::AddrAdd(kb, gen::AddrAdd(kb, x, row, int64_t{cfg.k} * xs), lane, int64_t{ve} * xs);
    }
    std::vector<Reg> acc(mt);
    for (Reg& a : acc) a = kb.Mov(Type::kF32, Operand::F32(0.0f));
    // With the fused RMSNorm: norm_w at the lane's elements, and each row's sum of squares.
    Reg nw_lane;
    std::vector<Reg> sq(cfg.norm ? mt : 0);
    if (cfg.norm) {
      nw_lane = gen::AddrAdd(kb, norm_w, lane, int64_t{ve} * 4);
      for (Reg& q : sq) q = kb.Mov(Type::kF32, Operand::F32(0.0f));
    }

    // One chunk at element offset `off` (bytes: off * es for w, off * xs for x, off * 4 for
    // norm_w).
    auto step = [&](Reg wa, const std::vector<Reg>& xa, int64_t off) {
      std::vector<Reg> wv = gen::LoadAsF32(kb, cfg.weight_dtype, wa, off * es, ve, ve * es,
                                           ptx::CacheOp::kNonCoherent);
      if (cfg.norm) {
        // norm_w scales the weights once for all the tile's rows.
        const std::vector<Reg> nv =
            gen::LoadAsF32(kb, ElemType::kF32, nw_lane, off * 4, ve, ve * 4);
        for (int e = 0; e < ve; ++e) wv[e] = gen::FMul(kb, wv[e], nv[e]);
      }
      for (int m = 0; m < mt; ++m) {
        const std::vector<Reg> xv = gen::LoadAsF32(kb, cfg.x_dtype, xa[m], off * xs, ve, ve * xs);
        for (int e = 0; e < ve; ++e)
          kb.EmitTo(acc[m], Op::kFma, Type::kF32, {xv[e], wv[e], acc[m]});
        if (cfg.norm) {
          for (int e = 0; e < ve; ++e)
            kb.EmitTo(sq[m], Op::kFma, Type::kF32, {xv[e], xv[e], sq[m]});
        }
      }
    };

    if (dependent) {
      // The first loop trip's weights stream into L2 while the previous kernel finishes.
      for (int64_t c = 0; c < std::min<int64_t>(full, kUnroll); ++c) {
        kb.PrefetchL2(Operand::Addr(w_lane, c * chunk * es));
      }
      kb.GridDepWait();
    }
    const int64_t trips = full / kUnroll;
    if (trips > 0) {
      const Reg t = kb.Mov(Type::kU32, 0);
      const ptx::Label loop = kb.NewLabel("k_loop");
      kb.Bind(loop);
      for (int u = 0; u < kUnroll; ++u) step(w_lane, x_lane, u * chunk);
      kb.EmitTo(w_lane, Op::kAdd, Type::kU64, {w_lane, kUnroll * chunk * es});
      for (Reg& xa : x_lane) kb.EmitTo(xa, Op::kAdd, Type::kU64, {xa, kUnroll * chunk * xs});
      if (cfg.norm) kb.EmitTo(nw_lane, Op::kAdd, Type::kU64, {nw_lane, kUnroll * chunk * 4});
      kb.EmitTo(t, Op::kAdd, Type::kU32, {t, 1});
      kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, t, trips), loop);
    }
    for (int64_t c = 0; c < full % kUnroll; ++c) step(w_lane, x_lane, c * chunk);
    if (rem > 0) {
      // Partial chunk: lanes past the end of K skip the loads (their sums stay as is).
      const int64_t off = (full % kUnroll) * chunk;
      const Reg active = kb.Setp(Cmp::kLt, Type::kU32, lane, rem / ve);
      auto g = kb.If(active);
      step(w_lane, x_lane, off);
    }

    for (Reg& a : acc) a = gen::WarpAllReduce(kb, a, gen::Reduce::kSum);
    for (int m = 0; m < static_cast<int>(sq.size()); ++m) {
      // x . (norm_w w) / sqrt(mean(x^2) + eps), the mean and rsqrt as rmsnorm takes them.
      const Reg total = gen::WarpAllReduce(kb, sq[m], gen::Reduce::kSum);
      const Reg mean = gen::FFma(kb, total, Operand::F32(1.0f / static_cast<float>(cfg.k)), eps);
      acc[m] = gen::FMul(kb, acc[m], kb.Emit(Op::kRsqrt, Type::kF32, {mean}));
    }
    Reg b;
    if (cfg.has_bias) {
      b = kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, bias, col, 4)));
    }
    const Reg lane0 = kb.Setp(Cmp::kEq, Type::kU32, lane, 0);
    for (int m = 0; m < mt; ++m) {
      const Reg row = gen::UAdd(kb, m0, m);
      const Reg store =
          kb.Emit(Op::kAnd, Type::kPred, {lane0, kb.Setp(Cmp::kLt, Type::kU32, row, m_rows)});
      auto g = kb.If(store);
      const Reg ya = gen::AddrAdd(kb, y, kb.Emit(Op::kMadLo, Type::kU32, {row, cfg.n, col}), 4);
      Reg v = acc[m];
      if (cfg.has_bias) v = gen::FAdd(kb, v, b);
      if (cfg.accumulate)
        v = gen::FAdd(kb, kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(ya)), v);
      kb.St(Space::kGlobal, Type::kF32, Operand::Addr(ya), {v});
    }
    kb.Bind(done);
    kb.Ret();
    return "";
  });
}

}  // namespace ptxserve::kernels
