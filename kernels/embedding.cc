#include "kernels/embedding.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

// Elements per thread step: up to a 128-bit table load, dividing dim.
int Vec(const EmbeddingConfig& c) {
  int v = 16 / ElemSize(c.table_dtype);
  while (c.dim % v != 0) v /= 2;
  return v;
}

}  // namespace

int EmbeddingConfig::Threads() const {
  return static_cast<int>(std::clamp<int64_t>(CeilDiv(dim / Vec(*this), 32) * 32, 32, 256));
}

absl::StatusOr<std::string> GenerateEmbedding(const EmbeddingConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const int vec = Vec(cfg);
    const int es = ElemSize(cfg.table_dtype);
    const int64_t nvec = cfg.dim / vec;
    const auto [table, ids, out, num_tokens, vocab] = DeclareParams<EmbeddingArgs>(kb);

    const auto [t, done] = gen::EnterRow(kb, num_tokens);
    const Reg id = kb.Ld1(Space::kGlobal, Type::kU32, Operand::Addr(gen::AddrAdd(kb, ids, t, 4)));
    // One unsigned compare rejects negative ids too.
    const Reg valid = kb.Setp(Cmp::kLt, Type::kU32, id, vocab);
    const Reg row =
        gen::AddrAdd(kb, table, kb.Selp(Type::kU32, id, 0, valid), int64_t{cfg.dim} * es);
    const Reg dst_row = gen::AddrAdd(kb, out, t, int64_t{cfg.dim} * 4);
    const Reg i = kb.Special(SReg::kTidX);
    const Reg step = kb.Special(SReg::kNtidX);
    const ptx::Label loop = kb.NewLabel("loop");
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, i, nvec), done);
    kb.Bind(loop);
    {
      std::vector<Reg> v = gen::LoadAsF32(
          kb, cfg.table_dtype, gen::AddrAdd(kb, row, i, int64_t{vec} * es), 0, vec, vec * es);
      for (Reg& r : v) r = kb.Selp(Type::kF32, r, Operand::F32(0.0f), valid);
      gen::StoreFromF32(kb, ElemType::kF32, gen::AddrAdd(kb, dst_row, i, int64_t{vec} * 4), 0, v,
                        vec * 4);
    }
    kb.EmitTo(i, Op::kAdd, Type::kU32, {i, step});
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, i, nvec), loop);
    kb.Bind(done);
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels
