#include "tests/kernels/residual_add.h"

#include "absl/strings/str_cat.h"
#include "kernels/elementwise_util.h"
#include "kernels/generator.h"

namespace ptxserve::kernels::testing {

LaunchDims ResidualAddLaunch(const ResidualAddConfig&, int64_t n) {
  return gen::ElementwiseLaunch(n);
}

absl::StatusOr<std::string> GenerateResidualAdd(const ResidualAddConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    kb.SetMaxThreads(gen::kElementwiseThreads);
    const Reg x = kb.GlobalPtrParam("x");
    const Reg y = kb.GlobalPtrParam("y");
    const Reg n = kb.Param("n", Type::kU32);
    gen::ForChunk(kb, gen::ChunkIndex(kb), n, [&](Reg first, int count) {
      const Reg xa = gen::AddrAdd(kb, x, first, 4);
      const Reg ya = gen::AddrAdd(kb, y, first, 4);
      std::vector<Reg> xv = gen::LoadAsF32(kb, ElemType::kF32, xa, 0, count, count * 4);
      const std::vector<Reg> yv = gen::LoadAsF32(kb, ElemType::kF32, ya, 0, count, count * 4);
      for (int e = 0; e < count; ++e) xv[e] = gen::FAdd(kb, xv[e], yv[e]);
      gen::StoreFromF32(kb, ElemType::kF32, xa, 0, xv, count * 4);
    });
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels::testing
