// The row stays in registers between the sum of squares and the scaling (dim is
// baked, so each thread's share is a fixed, unrolled set of vectors).
#include "kernels/rmsnorm.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

int Vec(int dim) {
  int v = 4;
  while (dim % v != 0) v /= 2;
  return v;
}

}  // namespace

absl::Status RmsNormConfig::CheckAcrossFields() const {
  if (out_dtype != ElemType::kF32 && dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rmsnorm config ", Key(), ": out_dtype ",
                                                   ElemTypeName(out_dtype), " needs an even dim"));
  }
  return absl::OkStatus();
}

int RmsNormConfig::Threads() const {
  return static_cast<int>(std::clamp<int64_t>(CeilDiv(dim / Vec(dim), 32) * 32, 32, 256));
}

absl::StatusOr<std::string> GenerateRmsNorm(const RmsNormConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const int vec = Vec(cfg.dim);
    const int64_t nvec = cfg.dim / vec;
    const int threads = cfg.Threads();
    const int warps = threads / 32;
    const int iters = static_cast<int>(CeilDiv(nvec, threads));
    const int wes = ElemSize(cfg.weight_dtype);
    const int os = ElemSize(cfg.out_dtype);
    const auto [x, w, out, num_rows, eps] = DeclareParams<RmsNormArgs>(kb);
    const ptx::Symbol scratch = kb.Shared("reduce", (warps + 1) * 4);

    const auto [row, done] = gen::EnterRow(kb, num_rows);
    const Reg tid = kb.Special(SReg::kTidX);
    const Reg lane = kb.Emit(Op::kAnd, Type::kB32, {tid, 31});
    const Reg warp = kb.Emit(Op::kShr, Type::kU32, {tid, 5});
    const Reg xrow = gen::AddrAdd(kb, x, row, int64_t{cfg.dim} * 4);
    const Reg orow = gen::AddrAdd(kb, out, row, int64_t{cfg.dim} * os);

    // Each thread's vectors: i = tid + it * threads; the last step may be partial.
    std::vector<std::vector<Reg>> vals(iters);
    std::vector<Reg> in_range(iters);
    std::vector<Reg> xa(iters);
    Reg sq = kb.Mov(Type::kF32, Operand::F32(0.0f));
    for (int it = 0; it < iters; ++it) {
      const Reg i = gen::UAdd(kb, tid, it * threads);
      xa[it] = gen::AddrAdd(kb, xrow, i, int64_t{vec} * 4);
      for (int e = 0; e < vec; ++e) vals[it].push_back(kb.Mov(Type::kF32, Operand::F32(0.0f)));
      if ((it + 1) * threads > nvec) {
        in_range[it] = kb.Setp(Cmp::kLt, Type::kU32, i, nvec);
        auto g = kb.If(in_range[it]);
        gen::LoadAsF32To(kb, ElemType::kF32, xa[it], 0, vals[it], vec * 4);
      } else {
        gen::LoadAsF32To(kb, ElemType::kF32, xa[it], 0, vals[it], vec * 4);
      }
      for (const Reg& v : vals[it]) sq = gen::FFma(kb, v, v, sq);
    }
    const Reg total = gen::BlockAllReduceF32(kb, sq, gen::Reduce::kSum, warps, scratch, lane, warp);
    const Reg mean = gen::FFma(kb, total, Operand::F32(1.0f / static_cast<float>(cfg.dim)), eps);
    const Reg inv = kb.Emit(Op::kRsqrt, Type::kF32, {mean});
    for (int it = 0; it < iters; ++it) {
      const Reg i = gen::UAdd(kb, tid, it * threads);
      auto scale = [&] {
        std::vector<Reg> wv = gen::LoadAsF32(
            kb, cfg.weight_dtype, gen::AddrAdd(kb, w, i, int64_t{vec} * wes), 0, vec, vec * wes);
        std::vector<Reg> o;
        for (int e = 0; e < vec; ++e)
          o.push_back(gen::FMul(kb, gen::FMul(kb, vals[it][e], inv), wv[e]));
        gen::StoreFromF32(kb, cfg.out_dtype, gen::AddrAdd(kb, orow, i, int64_t{vec} * os), 0, o,
                          vec * os);
      };
      if ((it + 1) * threads > nvec) {
        auto g = kb.If(in_range[it]);
        scale();
      } else {
        scale();
      }
    }
    kb.Bind(done);
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels
