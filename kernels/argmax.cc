#include "kernels/argmax.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/generator.h"

namespace ptxserve::kernels {

namespace {

constexpr uint32_t kNoId = 0xffffffffu;
constexpr int kUnroll = 4;  // float4 loads in flight per thread

// (v, i) <- (ov, oi) when the other ranks first: larger value, or equal and lower id.
void TakeBetter(gen::KernelBuilder& kb, Reg v, Reg i, Reg ov, Reg oi) {
  const Reg gt = kb.Setp(Cmp::kGt, Type::kF32, ov, v);
  const Reg eq = kb.Setp(Cmp::kEq, Type::kF32, ov, v);
  const Reg lower = kb.Setp(Cmp::kLo, Type::kU32, oi, i);
  const Reg take = kb.Emit(Op::kOr, Type::kPred, {gt, kb.Emit(Op::kAnd, Type::kPred, {eq, lower})});
  kb.EmitTo(v, Op::kSelp, Type::kF32, {ov, v, take});
  kb.EmitTo(i, Op::kSelp, Type::kB32, {oi, i, take});
}

void WarpArgmax(gen::KernelBuilder& kb, Reg v, Reg i) {
  for (int off = 16; off >= 1; off /= 2) {
    const Reg ov = kb.Shfl(ptx::ShflMode::kDown, v, off);
    const Reg oi = kb.Shfl(ptx::ShflMode::kDown, i, off);
    TakeBetter(kb, v, i, ov, oi);
  }
}

}  // namespace

namespace gen {

void BlockArgmax(KernelBuilder& kb, Reg* val, Reg* id, int num_warps, const ptx::Symbol& scratch,
                 Reg lane, Reg warp) {
  WarpArgmax(kb, *val, *id);
  if (num_warps == 1) return;
  const Reg base = kb.AddressOf(scratch);
  const Reg slot = kb.Emit(Op::kMadLo, Type::kU32, {warp, 8, base});
  {
    auto g = kb.If(kb.Setp(Cmp::kEq, Type::kU32, lane, 0));
    kb.St(Space::kShared, Type::kB32, Operand::Addr(slot), {*val, *id});
  }
  kb.BarSync();
  const Reg v = kb.Mov(Type::kF32, Operand::F32(-INFINITY));
  const Reg i = kb.Mov(Type::kU32, kNoId);
  {
    auto g = kb.If(kb.Setp(Cmp::kLt, Type::kU32, lane, num_warps));
    kb.LdTo(Space::kShared, Type::kB32,
            Operand::Addr(kb.Emit(Op::kMadLo, Type::kU32, {lane, 8, base})), {v, i});
  }
  WarpArgmax(kb, v, i);
  *val = v;
  *id = i;
}

}  // namespace gen

absl::StatusOr<std::string> GenerateArgmax(const ArgmaxConfig& cfg) {
  return GenerateKernel(cfg, [&](KernelBuilder& kb) {
    const int warps = cfg.threads / 32;
    const auto [logits, out, vocab, num_rows] = DeclareParams<ArgmaxArgs>(kb);
    const ptx::Symbol scratch = kb.Shared("argmax", int64_t{warps} * 8);

    const auto [row, done] = gen::EnterRow(kb, num_rows);
    const Reg tid = kb.Special(SReg::kTidX);
    const Reg lane = kb.Emit(Op::kAnd, Type::kB32, {tid, 31});
    const Reg warp = kb.Emit(Op::kShr, Type::kU32, {tid, 5});
    const Reg base = gen::AddrAdd(kb, logits, kb.Emit(Op::kMulLo, Type::kU32, {row, vocab}), 4);

    // Strided scan: ids rise within a thread, so only a strictly larger value replaces
    // the best, except that the first -inf is taken while nothing is held (NaN never is).
    Reg v = kb.Mov(Type::kF32, Operand::F32(-INFINITY));
    Reg id = kb.Mov(Type::kU32, kNoId);
    auto consider = [&](Reg x, Reg x_id, Reg in_row) {
      const Reg gt = kb.Setp(Cmp::kGt, Type::kF32, x, v);
      const Reg first =
          kb.Emit(Op::kAnd, Type::kPred,
                  {kb.Setp(Cmp::kEq, Type::kF32, x, v), kb.Setp(Cmp::kEq, Type::kU32, id, kNoId)});
      const Reg take =
          kb.Emit(Op::kAnd, Type::kPred, {in_row, kb.Emit(Op::kOr, Type::kPred, {gt, first})});
      kb.EmitTo(v, Op::kSelp, Type::kF32, {x, v, take});
      kb.EmitTo(id, Op::kSelp, Type::kB32, {x_id, id, take});
    };
    const ptx::Label scanned = kb.NewLabel("scanned");
    const ptx::Label scalar = kb.NewLabel("scalar");
    // Rows of a multiple of 4 entries are 16-byte aligned: float4 loads, kUnroll of them in
    // flight per thread (one dependent load per element kept a lone CTA latency-bound).
    kb.BraIf(kb.Setp(Cmp::kNe, Type::kU32, kb.Emit(Op::kAnd, Type::kB32, {vocab, 3}), 0), scalar);
    {
      const Reg quads = kb.Emit(Op::kShr, Type::kU32, {vocab, 2});
      const Reg q = kb.Mov(Type::kU32, tid);
      const ptx::Label loop = kb.NewLabel("scan4");
      kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, q, quads), scanned);
      kb.Bind(loop);
      std::vector<std::vector<Reg>> x(kUnroll);
      std::vector<Reg> in_row(kUnroll), quad(kUnroll);
      for (int u = 0; u < kUnroll; ++u) {
        quad[u] = gen::UAdd(kb, q, u * cfg.threads);
        in_row[u] = kb.Setp(Cmp::kLt, Type::kU32, quad[u], quads);
        // Defined past the row's end too (and never taken there: in_row guards them).
        for (int e = 0; e < 4; ++e) x[u].push_back(kb.Mov(Type::kF32, Operand::F32(-INFINITY)));
        auto g = kb.If(in_row[u]);
        kb.LdTo(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, base, quad[u], 16)),
                x[u]);
      }
      for (int u = 0; u < kUnroll; ++u) {
        const Reg first_id = kb.Emit(Op::kShl, Type::kB32, {quad[u], 2});
        for (int e = 0; e < 4; ++e) consider(x[u][e], gen::UAdd(kb, first_id, e), in_row[u]);
      }
      kb.EmitTo(q, Op::kAdd, Type::kU32, {q, kUnroll * cfg.threads});
      kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, q, quads), loop);
      kb.Bra(scanned);
    }
    kb.Bind(scalar);
    {
      const Reg i = kb.Mov(Type::kU32, tid);
      const ptx::Label loop = kb.NewLabel("scan");
      kb.BraIf(kb.Setp(Cmp::kGe, Type::kU32, i, vocab), scanned);
      kb.Bind(loop);
      consider(kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(gen::AddrAdd(kb, base, i, 4))), i,
               kb.Setp(Cmp::kLt, Type::kU32, i, vocab));
      kb.EmitTo(i, Op::kAdd, Type::kU32, {i, cfg.threads});
      kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, i, vocab), loop);
    }
    kb.Bind(scanned);
    gen::BlockArgmax(kb, &v, &id, warps, scratch, lane, warp);
    const Reg none = kb.Setp(Cmp::kEq, Type::kU32, id, kNoId);
    const Reg result = kb.Selp(Type::kU32, 0, id, none);
    {
      auto g = kb.If(kb.Setp(Cmp::kEq, Type::kU32, tid, 0));
      kb.St(Space::kGlobal, Type::kU32, Operand::Addr(gen::AddrAdd(kb, out, row, 4)), {result});
    }
    kb.Bind(done);
    kb.Ret();
  });
}

}  // namespace ptxserve::kernels
