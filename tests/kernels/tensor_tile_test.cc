// A 16x8x16 tile kernel written with the builder's tensor-core and cp.async forms: A and B
// staged into shared memory with cp.async (A's rows past `rows` zero-filled through
// src-size), loaded with ldmatrix, multiplied with one mma. It runs on the emulator against
// a reference matmul and is assembled with ptxas for sm_80 and sm_90 when ptxas exists.
#include <random>

#include "gtest/gtest.h"
#include "kernels/emu/emulator.h"
#include "kernels/emu/fp16.h"
#include "kernels/ptx/builder.h"
#include "tests/kernels/ptxas_util.h"

namespace ptxserve::ptx {
namespace {

absl::StatusOr<std::string> TileKernel(Target target) {
  KernelBuilder kb("tile_mma", target);
  kb.SetMaxThreads(32);
  const Reg a = kb.GlobalPtrParam("a");
  const Reg b = kb.GlobalPtrParam("b");
  const Reg d = kb.GlobalPtrParam("d");
  const Reg rows = kb.Param("rows", Type::kU32);
  const Reg sa = kb.AddressOf(kb.Shared("a", 512));
  const Reg sb = kb.AddressOf(kb.Shared("b", 256));
  const Reg lane = kb.Special(SReg::kLaneId);

  // Lane l stages 16-byte chunk l of A (half of row l / 2) and lanes 0..15 chunk l of B.
  const Reg chunk = kb.Emit(Op::kShl, Type::kB32, {lane, 4});
  const Reg chunk64 = kb.Cvt(Type::kU64, Type::kU32, chunk);
  const Reg a_row = kb.Emit(Op::kShr, Type::kU32, {lane, 1});
  const Reg a_bytes = kb.Selp(Type::kU32, 16, 0, kb.Setp(Cmp::kLt, Type::kU32, a_row, rows));
  kb.CpAsync(CpAsyncCache::kCa, Operand::Addr(kb.Emit(Op::kAdd, Type::kU32, {sa, chunk})),
             Operand::Addr(kb.Emit(Op::kAdd, Type::kU64, {a, chunk64})), 16, a_bytes);
  {
    auto in_b = kb.If(kb.Setp(Cmp::kLt, Type::kU32, lane, 16));
    kb.CpAsync(CpAsyncCache::kCg, Operand::Addr(kb.Emit(Op::kAdd, Type::kU32, {sb, chunk})),
               Operand::Addr(kb.Emit(Op::kAdd, Type::kU64, {b, chunk64})), 16);
  }
  kb.CpAsyncWaitAll();
  kb.BarSync();

  // A's four matrices: rows 0-7 / 8-15 of columns 0-7, then of columns 8-15 (lane l gives
  // row l % 16 of column block l / 16); B row-major K x 8, transposed by ldmatrix.
  const Reg row16 = kb.Emit(Op::kAnd, Type::kB32, {lane, 15});
  const Reg block = kb.Emit(Op::kShl, Type::kB32, {kb.Emit(Op::kShr, Type::kU32, {lane, 4}), 4});
  const Reg a_off =
      kb.Emit(Op::kAdd, Type::kU32, {kb.Emit(Op::kShl, Type::kB32, {row16, 5}), block});
  const std::vector<Reg> af =
      kb.Ldmatrix(4, false, Operand::Addr(kb.Emit(Op::kAdd, Type::kU32, {sa, a_off})));
  const Reg b_off = kb.Emit(Op::kShl, Type::kB32, {row16, 4});
  const std::vector<Reg> bf =
      kb.Ldmatrix(2, true, Operand::Addr(kb.Emit(Op::kAdd, Type::kU32, {sb, b_off})));
  std::vector<Reg> zero;
  for (int i = 0; i < 4; ++i) zero.push_back(kb.Mov(Type::kF32, Operand::F32(0)));
  const std::vector<Reg> df = kb.Mma(MmaShape::kM16N8K16, Type::kF16, af, bf, zero);

  // D fragment: rows g and g + 8, columns 2t and 2t + 1 (g = lane / 4, t = lane % 4).
  const Reg g8 = kb.Emit(Op::kShl, Type::kB32, {kb.Emit(Op::kShr, Type::kU32, {lane, 2}), 3});
  const Reg t2 = kb.Emit(Op::kShl, Type::kB32, {kb.Emit(Op::kAnd, Type::kB32, {lane, 3}), 1});
  const Reg elem = kb.Emit(Op::kAdd, Type::kU32, {g8, t2});
  const Reg out = kb.Emit(Op::kAdd, Type::kU64, {d, kb.Emit(Op::kMulWide, Type::kU32, {elem, 4})});
  kb.St(Space::kGlobal, Type::kF32, Operand::Addr(out), {df[0], df[1]});
  kb.St(Space::kGlobal, Type::kF32, Operand::Addr(out, 256), {df[2], df[3]});
  return kb.Finish({"tensor tile test"});
}

TEST(TensorTile, BuilderKernelMatchesReferenceOnTheEmulator) {
  absl::StatusOr<std::string> ptx = TileKernel(Target{});
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  const uint32_t rows = 13;  // rows 13..15 of A are zero-filled, not read
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> dist(-16, 16);
  std::vector<float> a(16 * 16), b(16 * 8);
  for (float& x : a) x = static_cast<float>(dist(rng)) / 4;
  for (float& x : b) x = static_cast<float>(dist(rng)) / 4;
  std::vector<uint16_t> ah(a.size()), bh(b.size());
  for (size_t i = 0; i < a.size(); ++i) ah[i] = i / 16 < rows ? emu::F32ToHalf(a[i]) : 0x7e00;
  for (size_t i = 0; i < b.size(); ++i) bh[i] = emu::F32ToHalf(b[i]);

  emu::Emulator emu;
  auto m = emu.LoadModule(*ptx);
  ASSERT_TRUE(m.ok()) << m.status() << "\n" << *ptx;
  auto f = emu.GetFunction(*m, "tile_mma");
  ASSERT_TRUE(f.ok());
  const uint64_t da = *emu.Alloc(ah.size() * 2), db = *emu.Alloc(bh.size() * 2);
  const uint64_t dd = *emu.Alloc(128 * 4);
  ASSERT_TRUE(emu.CopyHtoD(da, ah.data(), ah.size() * 2).ok());
  ASSERT_TRUE(emu.CopyHtoD(db, bh.data(), bh.size() * 2).ok());
  const absl::Status st = emu.Launch(*f, {1, 1, 1}, {32, 1, 1}, 0,
                                     {emu::KernelArg::Of(da), emu::KernelArg::Of(db),
                                      emu::KernelArg::Of(dd), emu::KernelArg::Of(rows)});
  ASSERT_TRUE(st.ok()) << st;
  std::vector<float> got(128);
  ASSERT_TRUE(emu.CopyDtoH(got.data(), dd, got.size() * 4).ok());
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      double want = 0;
      for (int k = 0; k < 16 && i < static_cast<int>(rows); ++k)
        want += a[i * 16 + k] * b[k * 8 + j];
      EXPECT_EQ(got[i * 8 + j], static_cast<float>(want)) << i << "," << j;
    }
  }
}

TEST(TensorTile, BuilderKernelAssemblesWithPtxas) {
  const std::string ptxas = kernels::testing::FindPtxas();
  if (ptxas.empty()) {
    if (kernels::testing::InCi()) FAIL() << "ptxas not found and CI=true";
    GTEST_SKIP() << "ptxas not found on PATH or in /usr/local/cuda/bin: the tile kernel is not "
                    "checked against the real assembler";
  }
  for (const Target& t : {Target{80, 70}, Target{80, 78}, Target{90, 78}}) {
    absl::StatusOr<std::string> ptx = TileKernel(t);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    for (const char* arch : {"sm_80", "sm_90"}) {
      if (t.sm == 90 && std::string(arch) == "sm_80") continue;
      const auto r = kernels::testing::AssembleAll(ptxas, {{t.Key(), *ptx}}, arch);
      EXPECT_TRUE(r.ok) << t.Key() << " for " << arch << ":\n" << r.log;
    }
  }
}

}  // namespace
}  // namespace ptxserve::ptx
