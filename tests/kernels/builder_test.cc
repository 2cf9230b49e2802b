// The PTX builder: text it writes, and the misuse it turns into errors instead of
// PTX that ptxas would reject.
#include "kernels/ptx/builder.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ptxserve::ptx {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<std::string> Build(const std::function<void(KernelBuilder&)>& body,
                                  Target target = Target{}) {
  KernelBuilder kb("k", target);
  body(kb);
  return kb.Finish({"test"});
}

TEST(BuilderTest, WritesHeaderParamsDeclarationsAndBody) {
  absl::StatusOr<std::string> ptx = Build([](KernelBuilder& kb) {
    kb.SetMaxThreads(64);
    const Reg a = kb.GlobalPtrParam("a");
    const Reg n = kb.Param("n", Type::kU32);
    const Reg tid = kb.Special(SReg::kTidX);
    const Reg in = kb.Setp(Cmp::kLt, Type::kU32, tid, n);
    const Reg off = kb.Emit(Op::kMulWide, Type::kU32, {tid, 4});
    const Reg addr = kb.Emit(Op::kAdd, Type::kU64, {a, off});
    auto g = kb.If(in);
    const Reg x = kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(addr));
    const Reg y = kb.Emit(Op::kFma, Type::kF32, {x, Operand::F32(2.0f), Operand::F32(-1.5f)});
    kb.St(Space::kGlobal, Type::kF32, Operand::Addr(addr, 16), {y});
  });
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_THAT(*ptx, HasSubstr(".version 7.8\n.target sm_80\n.address_size 64\n"));
  EXPECT_THAT(*ptx, HasSubstr(".visible .entry k(\n\t.param .u64 p_a,\n\t.param .u32 p_n\n)\n"));
  EXPECT_THAT(*ptx, HasSubstr(".maxntid 64, 1, 1\n"));
  EXPECT_THAT(*ptx, HasSubstr("\t.reg .pred \t%p<1>;\n"));
  EXPECT_THAT(*ptx, HasSubstr("\t.reg .f32 \t%f<2>;\n"));
  EXPECT_THAT(*ptx, HasSubstr("\t.reg .b64 \t%rd<4>;\n"));
  EXPECT_THAT(*ptx, HasSubstr("cvta.to.global.u64 \t%rd1, %rd0;"));
  EXPECT_THAT(*ptx, HasSubstr("\t@%p0 ld.global.f32 \t%f0, [%rd3];\n"));
  // Float immediates are exact hex: 2.0f and -1.5f.
  EXPECT_THAT(*ptx, HasSubstr("fma.rn.f32 \t%f1, %f0, 0f40000000, 0fBFC00000;"));
  EXPECT_THAT(*ptx, HasSubstr("\t@%p0 st.global.f32 \t[%rd3+16], %f1;\n"));
  EXPECT_THAT(*ptx, HasSubstr("\tret;\n}\n"));
  // Declarations come before the first instruction.
  EXPECT_LT(ptx->find(".reg .b64"), ptx->find("ld.param"));
}

TEST(BuilderTest, VectorHalfAndWarpForms) {
  absl::StatusOr<std::string> ptx = Build([](KernelBuilder& kb) {
    const Reg a = kb.GlobalPtrParam("a");
    const std::vector<Reg> v =
        kb.Ld(Space::kGlobal, Type::kB32, Operand::Addr(a), 4, CacheOp::kNonCoherent);
    const std::vector<Reg> h = kb.Unpack(v[0], Type::kF16);
    const Reg f = kb.Cvt(Type::kF32, Type::kF16, h[1]);
    const Reg packed = kb.CvtPack(Type::kF16x2, f, f);
    const Reg s = kb.Shfl(ShflMode::kDown, f, 16);
    const Reg b = kb.Shfl(ShflMode::kIdx, s, 0);
    const Reg e = kb.Emit(Op::kEx2, Type::kF32, {b});
    const Symbol sm = kb.Shared("buf", 256);
    const Reg base = kb.AddressOf(sm);
    kb.St(Space::kShared, Type::kB32, Operand::Addr(base, 4), {packed});
    kb.BarSync();
    kb.Atom(Op::kAtomAdd, Space::kGlobal, Type::kF32, Operand::Addr(a), e);
  });
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_THAT(*ptx, HasSubstr("ld.global.nc.v4.b32 \t{%r0, %r1, %r2, %r3}, [%rd1];"));
  EXPECT_THAT(*ptx, HasSubstr("mov.b32 \t{%rs0, %rs1}, %r0;"));
  EXPECT_THAT(*ptx, HasSubstr("cvt.f32.f16 \t%f0, %rs1;"));
  EXPECT_THAT(*ptx, HasSubstr("cvt.rn.f16x2.f32 \t%r4, %f0, %f0;"));
  EXPECT_THAT(*ptx, HasSubstr("shfl.sync.down.b32 \t%f1, %f0, 16, 31, -1;"));
  EXPECT_THAT(*ptx, HasSubstr("shfl.sync.idx.b32 \t%f2, %f1, 0, 31, -1;"));
  EXPECT_THAT(*ptx, HasSubstr("ex2.approx.ftz.f32 \t%f3, %f2;"));
  EXPECT_THAT(*ptx, HasSubstr("\t.shared .align 16 .b8 s_buf[256];"));
  EXPECT_THAT(*ptx, HasSubstr("mov.u32 \t%r5, s_buf;"));
  EXPECT_THAT(*ptx, HasSubstr("st.shared.b32 \t[%r5+4], %r4;"));
  EXPECT_THAT(*ptx, HasSubstr("bar.sync \t0;"));
  EXPECT_THAT(*ptx, HasSubstr("atom.global.add.f32 \t%f4, [%rd1], %f3;"));
}

TEST(BuilderTest, LabelsAndBranches) {
  absl::StatusOr<std::string> ptx = Build([](KernelBuilder& kb) {
    const Reg i = kb.Mov(Type::kU32, 0);
    const Label top = kb.NewLabel("loop");
    kb.Bind(top);
    kb.EmitTo(i, Op::kAdd, Type::kU32, {i, 1});
    kb.BraIf(kb.Setp(Cmp::kLt, Type::kU32, i, 10), top);
  });
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_THAT(*ptx, HasSubstr("$L_loop_0:\n\tadd.u32 \t%r0, %r0, 1;\n"));
  EXPECT_THAT(*ptx, HasSubstr("\t@%p0 bra \t$L_loop_0;\n"));
}

TEST(BuilderTest, DynamicSharedIsDeclaredAtModuleScope) {
  absl::StatusOr<std::string> ptx = Build([](KernelBuilder& kb) {
    const Reg base = kb.AddressOf(kb.DynamicShared(16));
    kb.Ld1(Space::kShared, Type::kF32, Operand::Addr(base));
  });
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_LT(ptx->find(".extern .shared .align 16 .b8 s_dynamic[];"), ptx->find(".entry"));
}

struct BadCase {
  const char* name;
  std::function<void(KernelBuilder&)> body;
  const char* message;
};

TEST(BuilderTest, MisuseIsAnErrorAndNoPtx) {
  const std::vector<BadCase> cases = {
      {"float register in an integer add",
       [](KernelBuilder& kb) {
         kb.Emit(Op::kAdd, Type::kU32, {kb.Mov(Type::kF32, Operand::F32(1)), 1});
       },
       "does not fit .u32"},
      {"integer register in a float op",
       [](KernelBuilder& kb) {
         kb.Emit(Op::kMul, Type::kF32, {kb.Mov(Type::kU32, 1), Operand::F32(1)});
       },
       "does not fit .f32"},
      {"immediate in a half op",
       [](KernelBuilder& kb) {
         const Reg h = kb.Cvt(Type::kF16, Type::kF32, Operand::F32(1), Round::kRn);
         kb.Emit(Op::kFma, Type::kF16, {h, h, 1});
       },
       "not usable as .f16"},
      {"bf16 add before sm_90",
       [](KernelBuilder& kb) {
         const Reg h = kb.Cvt(Type::kBF16, Type::kF32, Operand::F32(1), Round::kRn);
         kb.Emit(Op::kAdd, Type::kBF16, {h, h});
       },
       "needs sm_90"},
      {"bf16 -> f32 cvt before sm_90",
       [](KernelBuilder& kb) {
         const Reg h = kb.Cvt(Type::kBF16, Type::kF32, Operand::F32(1), Round::kRn);
         kb.Cvt(Type::kF32, Type::kBF16, h);
       },
       "needs sm_90"},
      {"no such form",
       [](KernelBuilder& kb) {
         kb.Emit(Op::kShl, Type::kF32, {kb.Mov(Type::kF32, Operand::F32(0)), 1});
       },
       "no instruction form"},
      {"wrong operand count", [](KernelBuilder& kb) { kb.Emit(Op::kAdd, Type::kU32, {1}); },
       "takes 2 sources"},
      {"narrowing cvt without rounding",
       [](KernelBuilder& kb) { kb.Cvt(Type::kF16, Type::kF32, Operand::F32(1)); },
       "narrowing needs"},
      {"unsigned comparison on floats",
       [](KernelBuilder& kb) { kb.Setp(Cmp::kLo, Type::kF32, Operand::F32(1), Operand::F32(2)); },
       "does not apply"},
      {"vector over 128 bits",
       [](KernelBuilder& kb) {
         kb.Ld(Space::kGlobal, Type::kF64, Operand::Addr(kb.GlobalPtrParam("a")), 4);
       },
       "wider than 128 bits"},
      {"global load through a 32-bit address",
       [](KernelBuilder& kb) {
         kb.Ld(Space::kGlobal, Type::kF32, Operand::Addr(kb.Mov(Type::kU32, 0)));
       },
       "bad address"},
      {"barrier under a guard",
       [](KernelBuilder& kb) {
         auto g = kb.If(kb.Setp(Cmp::kEq, Type::kU32, kb.Special(SReg::kTidX), 0));
         kb.BarSync();
       },
       "every thread must reach it"},
      {"label never placed", [](KernelBuilder& kb) { kb.Bra(kb.NewLabel("nowhere")); },
       "never placed"},
      {"label placed twice",
       [](KernelBuilder& kb) {
         const Label l = kb.NewLabel("twice");
         kb.Bind(l);
         kb.Bind(l);
       },
       "bound twice"},
      {"duplicate parameter",
       [](KernelBuilder& kb) {
         kb.Param("n", Type::kU32);
         kb.Param("n", Type::kU32);
       },
       "declared twice"},
      {"bad identifier", [](KernelBuilder& kb) { kb.Param("a-b", Type::kU32); },
       "not a PTX identifier"},
      {"caller failure", [](KernelBuilder& kb) { kb.Fail("head_dim 48"); }, "head_dim 48"},
  };
  for (const BadCase& c : cases) {
    absl::StatusOr<std::string> ptx = Build(c.body);
    ASSERT_FALSE(ptx.ok()) << c.name;
    EXPECT_THAT(std::string(ptx.status().message()), HasSubstr(c.message)) << c.name;
  }
}

TEST(BuilderTest, TensorCoreAndAsyncCopyForms) {
  absl::StatusOr<std::string> ptx = Build([](KernelBuilder& kb) {
    const Reg g = kb.GlobalPtrParam("a");
    const Reg n = kb.Param("n", Type::kU32);
    const Symbol tile = kb.Shared("tile", 512);
    const Reg base = kb.AddressOf(tile);
    kb.CpAsync(CpAsyncCache::kCg, Operand::Addr(base), Operand::Addr(g), 16);
    kb.CpAsync(CpAsyncCache::kCa, Operand::Addr(base, 16), Operand::Addr(g, 16), 8, n);
    kb.CpAsync(CpAsyncCache::kCa, Operand::Addr(tile, 32), Operand::Addr(g), 4, 0);
    kb.CpAsyncCommit();
    kb.CpAsyncWait(1);
    kb.CpAsyncWaitAll();
    const std::vector<Reg> a = kb.Ldmatrix(4, false, Operand::Addr(base));
    const std::vector<Reg> b = kb.Ldmatrix(2, true, Operand::Addr(base, 256));
    std::vector<Reg> c;
    for (int i = 0; i < 4; ++i) c.push_back(kb.Mov(Type::kF32, Operand::F32(0)));
    const std::vector<Reg> d = kb.Mma(MmaShape::kM16N8K16, Type::kF16, a, b, c);
    kb.MmaTo(d, MmaShape::kM16N8K8, Type::kBF16, {a[0], a[1]}, {b[0]}, d);
  });
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_THAT(*ptx, HasSubstr("\tcp.async.cg.shared.global \t[%r1], [%rd1], 16;\n"));
  EXPECT_THAT(*ptx, HasSubstr("\tcp.async.ca.shared.global \t[%r1+16], [%rd1+16], 8, %r0;\n"));
  EXPECT_THAT(*ptx, HasSubstr("\tcp.async.ca.shared.global \t[s_tile+32], [%rd1], 4, 0;\n"));
  EXPECT_THAT(*ptx, HasSubstr("\tcp.async.commit_group;\n\tcp.async.wait_group \t1;\n"
                              "\tcp.async.wait_all;\n"));
  EXPECT_THAT(*ptx, HasSubstr("\tldmatrix.sync.aligned.m8n8.x4.shared.b16 \t{%r2, %r3, %r4, %r5}, "
                              "[%r1];\n"));
  EXPECT_THAT(
      *ptx, HasSubstr("\tldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 \t{%r6, %r7}, [%r1+256];"));
  EXPECT_THAT(*ptx,
              HasSubstr("\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 \t{%f4, %f5, %f6, "
                        "%f7}, {%r2, %r3, %r4, %r5}, {%r6, %r7}, {%f0, %f1, %f2, %f3};\n"));
  EXPECT_THAT(*ptx,
              HasSubstr("\tmma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 \t{%f4, %f5, %f6, "
                        "%f7}, {%r2, %r3}, {%r6}, {%f4, %f5, %f6, %f7};\n"));
}

// Every target the builder accepts (sm_80+, ISA 7.0+) has these forms, so the gates are
// checked in the table itself: a wrong row would only show on an older target.
TEST(BuilderTest, TensorAndAsyncCopyGatesAreTheIsas) {
  struct Gate {
    const Form* form;
    int sm, ptx;
  };
  const Gate gates[] = {
      {FindForm(Op::kMmaM16N8K16, Type::kF16), 80, 70},
      {FindForm(Op::kMmaM16N8K16, Type::kBF16), 80, 70},
      {FindForm(Op::kMmaM16N8K8, Type::kF16), 75, 65},
      {FindForm(Op::kMmaM16N8K8, Type::kBF16), 80, 70},
      {FindForm(Op::kLdmatrix, Type::kB16), 75, 65},
      {FindUntypedForm(Op::kCpAsyncCa), 80, 70},
      {FindUntypedForm(Op::kCpAsyncCg), 80, 70},
      {FindUntypedForm(Op::kCpAsyncCommit), 80, 70},
      {FindUntypedForm(Op::kCpAsyncWait), 80, 70},
      {FindUntypedForm(Op::kCpAsyncWaitAll), 80, 70},
  };
  for (const Gate& g : gates) {
    ASSERT_NE(g.form, nullptr);
    EXPECT_EQ(g.form->min_sm, g.sm) << g.form->text;
    EXPECT_EQ(g.form->min_ptx, g.ptx) << g.form->text;
  }
  EXPECT_EQ(FindForm(Op::kMmaM16N8K16, Type::kF32), nullptr);
}

TEST(BuilderTest, TensorAndAsyncCopyMisuseIsAnError) {
  auto frag = [](KernelBuilder& kb, int n, Type t) {
    std::vector<Reg> v;
    for (int i = 0; i < n; ++i) v.push_back(kb.NewReg(t));
    return v;
  };
  const std::vector<BadCase> cases = {
      {"ldmatrix of three matrices",
       [](KernelBuilder& kb) { kb.Ldmatrix(3, false, Operand::Addr(kb.Mov(Type::kU32, 0))); },
       "loads 1, 2 or 4 matrices"},
      {"ldmatrix from a global address",
       [](KernelBuilder& kb) { kb.Ldmatrix(1, false, Operand(kb.GlobalPtrParam("a"))); },
       "bad shared address"},
      {"ldmatrix under a guard",
       [](KernelBuilder& kb) {
         auto g = kb.If(kb.Setp(Cmp::kEq, Type::kU32, kb.Special(SReg::kTidX), 0));
         kb.Ldmatrix(1, false, Operand::Addr(kb.Mov(Type::kU32, 0)));
       },
       "every lane must run it"},
      {"mma with f32 inputs",
       [&](KernelBuilder& kb) {
         kb.Mma(MmaShape::kM16N8K16, Type::kF32, frag(kb, 4, Type::kB32), frag(kb, 2, Type::kB32),
                frag(kb, 4, Type::kF32));
       },
       "inputs must be f16 or bf16"},
      {"mma with a k8 A fragment",
       [&](KernelBuilder& kb) {
         kb.Mma(MmaShape::kM16N8K16, Type::kF16, frag(kb, 2, Type::kB32), frag(kb, 2, Type::kB32),
                frag(kb, 4, Type::kF32));
       },
       "takes 4 d, 4 a, 2 b and 4 c registers"},
      {"mma accumulating into integers",
       [&](KernelBuilder& kb) {
         kb.Mma(MmaShape::kM16N8K8, Type::kF16, frag(kb, 2, Type::kB32), frag(kb, 1, Type::kB32),
                frag(kb, 4, Type::kU32));
       },
       "does not fit .f32"},
      {"cp.async.cg of 8 bytes",
       [](KernelBuilder& kb) {
         kb.CpAsync(CpAsyncCache::kCg, Operand::Addr(kb.Mov(Type::kU32, 0)),
                    Operand::Addr(kb.GlobalPtrParam("a")), 8);
       },
       ".cg copies 16 bytes"},
      {"cp.async of 12 bytes",
       [](KernelBuilder& kb) {
         kb.CpAsync(CpAsyncCache::kCa, Operand::Addr(kb.Mov(Type::kU32, 0)),
                    Operand::Addr(kb.GlobalPtrParam("a")), 12);
       },
       "copies 4, 8 or 16 bytes"},
      {"cp.async src-size over the copy",
       [](KernelBuilder& kb) {
         kb.CpAsync(CpAsyncCache::kCa, Operand::Addr(kb.Mov(Type::kU32, 0)),
                    Operand::Addr(kb.GlobalPtrParam("a")), 8, 9);
       },
       "src-size 9 is not in 0..8"},
      {"cp.async from a shared address",
       [](KernelBuilder& kb) {
         const Reg s = kb.Mov(Type::kU32, 0);
         kb.CpAsync(CpAsyncCache::kCa, Operand::Addr(s), Operand::Addr(s), 4);
       },
       "bad global source"},
      {"cp.async.wait_group of a negative count", [](KernelBuilder& kb) { kb.CpAsyncWait(-1); },
       "negative"},
  };
  for (const BadCase& c : cases) {
    absl::StatusOr<std::string> ptx = Build(c.body);
    ASSERT_FALSE(ptx.ok()) << c.name;
    EXPECT_THAT(std::string(ptx.status().message()), HasSubstr(c.message)) << c.name;
  }
}

TEST(BuilderTest, FirstErrorWinsAndLaterCallsAreHarmless) {
  KernelBuilder kb("k", Target{});
  kb.Emit(Op::kAdd, Type::kU32, {kb.Mov(Type::kF32, 0), 1});
  kb.Fail("second");
  kb.BarSync();
  absl::StatusOr<std::string> ptx = kb.Finish();
  ASSERT_FALSE(ptx.ok());
  EXPECT_THAT(std::string(ptx.status().message()), Not(HasSubstr("second")));
}

TEST(BuilderTest, TargetValidation) {
  EXPECT_TRUE((Target{80, 70}).Validate().ok());
  EXPECT_TRUE((Target{90, 78}).Validate().ok());
  EXPECT_TRUE((Target{90, 90}).Validate().ok());
  EXPECT_FALSE((Target{90, 70}).Validate().ok());  // sm_90 needs 7.8
  EXPECT_FALSE((Target{75, 78}).Validate().ok());
  EXPECT_FALSE((Target{80, 91}).Validate().ok());
  KernelBuilder kb("k", Target{70, 78});
  EXPECT_FALSE(kb.Finish().ok());
  absl::StatusOr<std::string> sm90 = Build([](KernelBuilder&) {}, Target{90, 80});
  ASSERT_TRUE(sm90.ok());
  EXPECT_THAT(*sm90, HasSubstr(".version 8.0\n.target sm_90\n"));
}

// Programmatic dependent launch exists from sm_90 (PTX ISA 7.8): an sm_80 kernel that asks
// for it fails to build instead of reaching ptxas.
TEST(BuilderTest, GridDependencyControlIsSm90Only) {
  auto body = [](KernelBuilder& kb) {
    const Reg w = kb.GlobalPtrParam("w");
    kb.GridDepLaunchDependents();
    kb.PrefetchL2(Operand::Addr(w, 128));
    kb.GridDepWait();
  };
  absl::StatusOr<std::string> sm90 = Build(body, Target{90, 78});
  ASSERT_TRUE(sm90.ok()) << sm90.status();
  EXPECT_THAT(*sm90,
              HasSubstr("\tgriddepcontrol.launch_dependents;\n\tprefetch.global.L2 \t[%rd1+128];"
                        "\n\tgriddepcontrol.wait;\n"));
  absl::StatusOr<std::string> sm80 = Build(body, Target{80, 78});
  ASSERT_FALSE(sm80.ok());
  EXPECT_THAT(std::string(sm80.status().message()),
              HasSubstr("griddepcontrol.launch_dependents needs sm_90, target is sm_80"));
  absl::StatusOr<std::string> bad =
      Build([](KernelBuilder& kb) { kb.PrefetchL2(Operand::Addr(kb.Param("n", Type::kU32))); });
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("prefetch.global.L2: bad address"));
}

TEST(BuilderTest, SameCallsSameBytes) {
  auto body = [](KernelBuilder& kb) {
    const Reg a = kb.GlobalPtrParam("a");
    const Reg x = kb.Ld1(Space::kGlobal, Type::kF32, Operand::Addr(a));
    kb.St(Space::kGlobal, Type::kF32, Operand::Addr(a, 4), {kb.Emit(Op::kRsqrt, Type::kF32, {x})});
  };
  absl::StatusOr<std::string> a = Build(body);
  absl::StatusOr<std::string> b = Build(body);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(OperandTest, Text) {
  EXPECT_EQ(Operand::F32(1.0f).Text(), "0f3F800000");
  EXPECT_EQ(Operand::F32(-INFINITY).Text(), "0fFF800000");
  EXPECT_EQ(Operand::F64(1.0).Text(), "0d3FF0000000000000");
  EXPECT_EQ(Operand(-3).Text(), "-3");
  EXPECT_EQ(Operand::Addr(Reg{Type::kU64, 3}, -8).Text(), "[%rd3-8]");
  EXPECT_EQ(Operand::Addr(Symbol{"s_x"}, 12).Text(), "[s_x+12]");
  EXPECT_EQ(Operand::Vec({Reg{Type::kF32, 1}, Reg{Type::kF32, 2}}).Text(), "{%f1, %f2}");
  EXPECT_EQ((Reg{Type::kPred, 7}).Name(), "%p7");
  EXPECT_EQ((Reg{Type::kF16, 2}).Name(), "%rs2");
  EXPECT_EQ((Reg{Type::kF16x2, 2}).Name(), "%r2");
}

}  // namespace
}  // namespace ptxserve::ptx
