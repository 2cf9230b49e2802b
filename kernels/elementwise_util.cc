#include "kernels/elementwise_util.h"

#include <algorithm>

#include "kernels/generator.h"

namespace ptxserve::kernels::gen {

Reg ChunkIndex(KernelBuilder& kb) {
  const Reg cta = kb.Special(SReg::kCtaidX);
  const Reg tid = kb.Special(SReg::kTidX);
  return kb.Emit(Op::kMadLo, Type::kU32, {cta, kElementwiseThreads, tid});
}

void ForChunk(KernelBuilder& kb, Reg chunk, Reg n,
              const std::function<void(Reg first, int count)>& body) {
  const Reg first = kb.Emit(Op::kShl, Type::kB32, {chunk, 2});
  const Reg last = gen::UAdd(kb, first, 3);
  const ptx::Label tail = kb.NewLabel("tail");
  const ptx::Label done = kb.NewLabel("chunk_done");
  // No barriers in these kernels: threads may branch freely.
  kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, last, n), tail);
  body(first, 4);
  kb.Bra(done);
  kb.Bind(tail);
  for (int e = 0; e < 4; ++e) {
    const Reg i = gen::UAdd(kb, first, e);
    const ptx::Label skip = kb.NewLabel("skip");
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, i, n), skip);
    body(i, 1);
    kb.Bind(skip);
  }
  kb.Bind(done);
}

LaunchDims ElementwiseLaunch(int64_t n) {
  LaunchDims d;
  d.grid = {static_cast<uint32_t>(std::max<int64_t>(CeilDiv(n, 4 * kElementwiseThreads), 1)), 1, 1};
  d.block = {kElementwiseThreads, 1, 1};
  return d;
}

}  // namespace ptxserve::kernels::gen
