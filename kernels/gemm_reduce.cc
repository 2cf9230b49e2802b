#include "kernels/gemm_reduce.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/elementwise_util.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

absl::Status GemmReduceConfig::CheckAcrossFields() const {
  if (y_dtype != ElemType::kF32 && accumulate) {
    return absl::InvalidArgumentError(absl::StrCat("gemm_reduce config ", Key(), ": y_dtype ",
                                                   ElemTypeName(y_dtype),
                                                   " with accumulate: the residual stream is f32"));
  }
  return absl::OkStatus();
}

GemmReduceConfig GemmReduceFor(const GemmConfig& gemm) {
  GemmReduceConfig r;
  r.n = gemm.n;
  r.splits = gemm.split_k;
  r.has_bias = gemm.has_bias;
  r.accumulate = gemm.accumulate;
  r.swiglu = gemm.swiglu;
  r.y_dtype = gemm.y_dtype;
  r.target = gemm.target;
  return r;
}

int64_t GemmWorkspaceFloatsPerRow(const GemmConfig& gemm) {
  if (gemm.split_k <= 1) return 0;
  return int64_t{gemm.split_k} * gemm.n * (gemm.swiglu ? 2 : 1);
}

LaunchDims GemmReduceLaunch(const GemmReduceConfig& cfg, int64_t m) {
  return gen::ElementwiseLaunch(m * cfg.n);
}

absl::StatusOr<std::string> GenerateGemmReduce(const GemmReduceConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    kb.SetMaxThreads(gen::kElementwiseThreads);
    const auto [partial, bias, y, m] =
        cfg.has_bias ? DeclareParams<GemmReduceArgs>(kb)
                     : DeclareParams<GemmReduceArgs>(kb, {&GemmReduceArgs::bias});
    const int cols = cfg.swiglu ? 2 * cfg.n : cfg.n;
    // One slice's partials lie m x cols floats after the previous slice's.
    const Reg slice_bytes = kb.Emit(Op::kMulWide, Type::kU32, {m, static_cast<int64_t>(cols) * 4});
    // `count` outputs from output index `first` (row-major [M][N]), all in one row.
    auto outputs = [&](Reg first, int count) {
      const Reg row = gen::DivConst(kb, first, cfg.n);
      const Reg col =
          kb.Emit(Op::kSub, Type::kU32, {first, kb.Emit(Op::kMulLo, Type::kU32, {row, cfg.n})});
      const Reg at =
          gen::AddrAdd(kb, partial, kb.Emit(Op::kMadLo, Type::kU32, {row, cols, col}), 4);
      // The sums of the slices at column offset `off` (0, or n for the up half), in order.
      auto summed = [&](int64_t off) {
        std::vector<Reg> sum = gen::LoadAsF32(kb, ElemType::kF32, at, off * 4, count, count * 4);
        Reg p = at;
        for (int s = 1; s < cfg.splits; ++s) {
          p = kb.Emit(Op::kAdd, Type::kU64, {p, slice_bytes});
          const std::vector<Reg> v =
              gen::LoadAsF32(kb, ElemType::kF32, p, off * 4, count, count * 4);
          for (int e = 0; e < count; ++e) sum[e] = gen::FAdd(kb, sum[e], v[e]);
        }
        return sum;
      };
      std::vector<Reg> v = summed(0);
      if (cfg.swiglu) {
        const std::vector<Reg> up = summed(cfg.n);
        for (int e = 0; e < count; ++e) v[e] = gen::SiluTimes(kb, v[e], up[e]);
      }
      if (cfg.has_bias) {
        const std::vector<Reg> b =
            gen::LoadAsF32(kb, ElemType::kF32, gen::AddrAdd(kb, bias, col, 4), 0, count, count * 4);
        for (int e = 0; e < count; ++e) v[e] = gen::FAdd(kb, v[e], b[e]);
      }
      const int ys = ElemSize(cfg.y_dtype);
      const Reg ya = gen::AddrAdd(kb, y, first, ys);
      if (cfg.accumulate) {
        const std::vector<Reg> old = gen::LoadAsF32(kb, ElemType::kF32, ya, 0, count, count * 4);
        for (int e = 0; e < count; ++e) v[e] = gen::FAdd(kb, old[e], v[e]);
      }
      gen::StoreFromF32(kb, cfg.y_dtype, ya, 0, v, count * ys);
    };
    const Reg total = kb.Emit(Op::kMulLo, Type::kU32, {m, cfg.n});
    gen::ForChunk(kb, gen::ChunkIndex(kb), total, [&](Reg first, int count) {
      // Four outputs share a row and 16-byte alignment when n is a multiple of 4; else one
      // at a time.
      if (count == 1 || cfg.n % 4 == 0) return outputs(first, count);
      for (int e = 0; e < count; ++e) outputs(gen::UAdd(kb, first, e), 1);
    });
    kb.Ret();
    return absl::StrCat("split-K reduction of ", cfg.splits, " slices");
  });
}

}  // namespace ptxserve::kernels
