#include "kernels/silu_mul.h"

#include "absl/strings/str_cat.h"
#include "kernels/elementwise_util.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

LaunchDims SiluMulLaunch(const SiluMulConfig&, int64_t n) { return gen::ElementwiseLaunch(n); }

absl::StatusOr<std::string> GenerateSiluMul(const SiluMulConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const int inter = cfg.fused_inter;
    kb.SetMaxThreads(gen::kElementwiseThreads);
    // A fused gate/up input holds both halves: `up` is then never read.
    const auto [gate, up, out, n] = inter == 0 ? DeclareParams<SiluMulArgs>(kb)
                                               : DeclareParams<SiluMulArgs>(kb, {&SiluMulArgs::up});
    gen::ForChunk(kb, gen::ChunkIndex(kb), n, [&](Reg first, int count) {
      Reg ga;
      Reg ua;
      if (inter == 0) {
        ga = gen::AddrAdd(kb, gate, first, 4);
        ua = gen::AddrAdd(kb, up, first, 4);
      } else {
        // Output i = r * I + j reads gate_up[r][0][j] and gate_up[r][1][j]; a chunk of 4
        // never straddles rows because I is a multiple of 4.
        const Reg r = gen::DivConst(kb, first, inter);
        const Reg src =
            kb.Emit(Op::kAdd, Type::kU32, {first, kb.Emit(Op::kMulLo, Type::kU32, {r, inter})});
        ga = gen::AddrAdd(kb, gate, src, 4);
        ua = kb.Emit(Op::kAdd, Type::kU64, {ga, int64_t{inter} * 4});
      }
      const std::vector<Reg> g = gen::LoadAsF32(kb, ElemType::kF32, ga, 0, count, count * 4);
      const std::vector<Reg> u = gen::LoadAsF32(kb, ElemType::kF32, ua, 0, count, count * 4);
      std::vector<Reg> o;
      for (int e = 0; e < count; ++e) o.push_back(gen::SiluTimes(kb, g[e], u[e]));
      const int os = ElemSize(cfg.out_dtype);
      gen::StoreFromF32(kb, cfg.out_dtype, gen::AddrAdd(kb, out, first, os), 0, o, count * os);
    });
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels
