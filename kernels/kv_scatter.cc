#include "kernels/kv_scatter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

// Elements one thread moves per step: one 128-bit f32 load, and for half pools the
// 8 elements that make one 128-bit store.
int VecElems(const KvScatterConfig& c) { return c.kv_dtype == ElemType::kF32 ? 4 : 8; }

}  // namespace

int KvScatterConfig::Threads() const {
  const int64_t vecs = int64_t{num_kv_heads} * head_dim / VecElems(*this);
  return static_cast<int>(std::min<int64_t>(256, CeilDiv(vecs, 32) * 32));
}

namespace gen {

Reg PoolTokenElem(KernelBuilder& kb, Reg slot, int num_kv_heads, int block_size, int head_dim) {
  Reg block;
  Reg offset;
  if (IsPow2(block_size)) {
    block = kb.Emit(Op::kShr, Type::kU64, {slot, Log2(block_size)});
    offset = kb.Emit(Op::kAnd, Type::kB64, {slot, block_size - 1});
  } else {
    block = kb.Emit(Op::kDiv, Type::kU64, {slot, block_size});
    offset = kb.Emit(Op::kRem, Type::kU64, {slot, block_size});
  }
  const Reg dst_row = kb.Emit(Op::kMulLo, Type::kU64, {offset, head_dim});
  return kb.Emit(Op::kMadLo, Type::kU64,
                 {block, int64_t{num_kv_heads} * block_size * head_dim, dst_row});
}

}  // namespace gen

absl::StatusOr<std::string> GenerateKvScatter(const KvScatterConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const int w = VecElems(cfg);
    const int es = ElemSize(cfg.kv_dtype);
    const int64_t vecs_per_head = cfg.head_dim / w;
    const int64_t vecs = cfg.num_kv_heads * vecs_per_head;
    const int64_t row = int64_t{cfg.num_kv_heads} * cfg.head_dim;  // f32 elements per token
    const auto [k, v, slots, k_pool, v_pool, num_tokens] = DeclareParams<KvScatterArgs>(kb);

    // No barriers here, so threads with nothing to do may simply leave.
    const auto [t, done] = gen::EnterRow(kb, num_tokens);
    const Reg slot =
        kb.Ld1(Space::kGlobal, Type::kU64, Operand::Addr(gen::AddrAdd(kb, slots, t, 8)));
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kS64, slot, 0), done);

    const Reg dst_tok =
        gen::PoolTokenElem(kb, slot, cfg.num_kv_heads, cfg.block_size, cfg.head_dim);
    const Reg k_pool_tok = gen::AddrAdd(kb, k_pool, dst_tok, es);
    const Reg v_pool_tok = gen::AddrAdd(kb, v_pool, dst_tok, es);
    const Reg src_row = kb.Emit(Op::kMulWide, Type::kU32, {t, row * 4});
    const Reg k_tok = kb.Emit(Op::kAdd, Type::kU64, {k, src_row});
    const Reg v_tok = kb.Emit(Op::kAdd, Type::kU64, {v, src_row});

    const Reg i = kb.Special(SReg::kTidX);
    const Reg step = kb.Special(SReg::kNtidX);
    const ptx::Label loop = kb.NewLabel("loop");
    kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, i, vecs), done);
    kb.Bind(loop);
    {
      const Reg h = gen::DivConst(kb, i, vecs_per_head);
      const Reg dv = gen::RemConst(kb, i, vecs_per_head);
      const Reg dst_in_head = kb.Emit(Op::kMulLo, Type::kU32, {dv, w});
      const Reg dst_elem =
          kb.Emit(Op::kMadLo, Type::kU32, {h, int64_t{cfg.block_size} * cfg.head_dim, dst_in_head});
      const Reg src_off = kb.Emit(Op::kMulWide, Type::kU32, {i, w * 4});
      const Reg dst_off = kb.Emit(Op::kMulWide, Type::kU32, {dst_elem, es});
      for (int kv = 0; kv < 2; ++kv) {
        const Reg src = kb.Emit(Op::kAdd, Type::kU64, {kv == 0 ? k_tok : v_tok, src_off});
        const Reg dst = kb.Emit(Op::kAdd, Type::kU64, {kv == 0 ? k_pool_tok : v_pool_tok, dst_off});
        const std::vector<Reg> vals = gen::LoadAsF32(kb, ElemType::kF32, src, 0, w, 16);
        gen::StoreFromF32(kb, cfg.kv_dtype, dst, 0, vals, w * es);
      }
    }
    kb.EmitTo(i, Op::kAdd, Type::kU32, {i, step});
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, i, vecs), loop);
    kb.Bind(done);
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels
