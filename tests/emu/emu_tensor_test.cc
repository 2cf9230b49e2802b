// Tensor-core instructions against the PTX ISA's own description. Every fragment layout of
// mma.m16n8k16 / m16n8k8 (f16 and bf16 in, f32 accumulators) and of ldmatrix (.x1/.x2/.x4,
// with and without .trans) is computed here from the ISA's formulas, written out
// independently of the emulator (groupID = %laneid >> 2, threadID_in_group = %laneid % 4,
// then the per-element row/column rules); a whole 16x8x16 tile staged with cp.async and
// loaded with ldmatrix is checked against a reference matmul. The kernels generated here
// also go through ptxas for sm_80 and sm_90 when it is installed.
#include <gmock/gmock.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "kernels/emu/fp16.h"
#include "tests/emu/emu_test_util.h"
#include "tests/kernels/ptxas_util.h"

namespace ptxserve::emu::testing {
namespace {

using ::testing::HasSubstr;

// ---- the ISA's layouts ("Matrix Fragments for mma.m16n8k16 with floating point type",
// "Matrix Fragments for mma.m16n8k8", "Warp-level matrix load instruction: ldmatrix") ----

struct Pos {
  int row, col;
};

// Element a_i of lane `laneid`'s A fragment (i < k / 2).
Pos IsaA(int k, int laneid, int i) {
  const int groupID = laneid >> 2, threadID_in_group = laneid % 4;
  if (k == 16) {
    const int row = (i < 2 || (4 <= i && i < 6)) ? groupID : groupID + 8;
    const int col =
        i < 4 ? (threadID_in_group * 2) + (i & 0x1) : (threadID_in_group * 2) + (i & 0x1) + 8;
    return {row, col};
  }
  const int row = (i == 0 || i == 1) ? groupID : groupID + 8;  // a0, a1 | a2, a3
  return {row, threadID_in_group * 2 + (i & 0x1)};
}

// Element b_i of the B fragment (i < k / 4): B is K x 8.
Pos IsaB(int k, int laneid, int i) {
  const int groupID = laneid >> 2, threadID_in_group = laneid % 4;
  if (k == 16) {
    const int row =
        i < 2 ? (threadID_in_group * 2) + (i & 0x1) : (threadID_in_group * 2) + (i & 0x1) + 8;
    return {row, groupID};
  }
  return {(threadID_in_group * 2) + i, groupID};
}

// Element c_i (and d_i) of the 16 x 8 accumulator fragment, for both shapes.
Pos IsaC(int laneid, int i) {
  const int groupID = laneid >> 2, threadID_in_group = laneid % 4;
  return {i < 2 ? groupID : groupID + 8, (threadID_in_group * 2) + (i & 0x1)};
}

uint16_t ToHalf(float v, bool bf16) { return bf16 ? F32ToBF16(v) : F32ToHalf(v); }

// Random multiples of 1/8 in [-4, 4]: exact in f16 and bf16, and every product and sum of
// a 16-term dot product is exact in f32, so results compare with ==.
std::vector<float> Exact(std::mt19937& rng, size_t n) {
  std::uniform_int_distribution<int> d(-32, 32);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(rng)) / 8.0f;
  return v;
}

// D = A * B + C in double; A is 16 x k, B k x 8, C 16 x 8, all row-major.
std::vector<float> RefMma(int k, const std::vector<float>& a, const std::vector<float>& b,
                          const std::vector<float>& c) {
  std::vector<float> d(16 * 8);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      double s = c[i * 8 + j];
      for (int kk = 0; kk < k; ++kk) s += double{a[i * k + kk]} * b[kk * 8 + j];
      d[i * 8 + j] = static_cast<float>(s);
    }
  }
  return d;
}

// ---- generated kernels ----

// One warp: lane l loads its fragment registers from frag[l][0..15] (A in words 0..3, B in
// 4..5, C in 8..11 as f32 bits), runs one mma and stores D to out[l][0..3].
std::string MmaFragmentKernel(int k, bool bf16) {
  const std::string ab = bf16 ? "bf16" : "f16";
  const std::string a_regs = k == 16 ? "{%ra0, %ra1, %ra2, %ra3}" : "{%ra0, %ra1}";
  const std::string b_regs = k == 16 ? "{%rb0, %rb1}" : "{%rb0}";
  return absl::StrCat(R"(.version 7.8
.target sm_80
.address_size 64

.visible .entry mma_fragments(.param .u64 frag, .param .u64 out)
{
    .reg .b32 %r<2>;
    .reg .b32 %ra<4>, %rb<2>;
    .reg .f32 %fc<4>, %fd<4>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [frag];
    ld.param.u64 %rd2, [out];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r1, %laneid;
    mul.wide.u32 %rd3, %r1, 64;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.v4.b32 {%ra0, %ra1, %ra2, %ra3}, [%rd4];
    ld.global.v2.b32 {%rb0, %rb1}, [%rd4+16];
    ld.global.v4.f32 {%fc0, %fc1, %fc2, %fc3}, [%rd4+32];
    mma.sync.aligned.m16n8k)",
                      k, ".row.col.f32.", ab, ".", ab, ".f32 {%fd0, %fd1, %fd2, %fd3}, ", a_regs,
                      ", ", b_regs, R"(, {%fc0, %fc1, %fc2, %fc3};
    mul.wide.u32 %rd5, %r1, 16;
    add.s64 %rd6, %rd2, %rd5;
    st.global.v4.f32 [%rd6], {%fd0, %fd1, %fd2, %fd3};
    ret;
}
)");
}

// One warp: row l of rows (16 bytes) goes to row l of a shared tile; lane l then passes
// tile + offset[l] to ldmatrix and stores its `num` result registers to out[l][0..num-1].
std::string LdmatrixKernel(int num, bool trans) {
  const std::vector<std::string> regs = {"%m0", "%m1", "%m2", "%m3"};
  const std::vector<std::string> used(regs.begin(), regs.begin() + num);
  const std::string vec = absl::StrCat("{", absl::StrJoin(used, ", "), "}");
  const std::string store = num == 1 ? absl::StrCat("st.global.b32 [%rd9], ", used[0])
                                     : absl::StrCat("st.global.v", num, ".b32 [%rd9], ", vec);
  return absl::StrCat(R"(.version 7.8
.target sm_80
.address_size 64

.visible .entry ldmatrix_rows(.param .u64 rows, .param .u64 offset, .param .u64 out)
{
    .shared .align 16 .b8 tile[512];
    .reg .b32 %r<12>;
    .reg .b32 %m<4>;
    .reg .b64 %rd<10>;

    ld.param.u64 %rd1, [rows];
    ld.param.u64 %rd2, [offset];
    ld.param.u64 %rd3, [out];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r1, %laneid;
    mul.wide.u32 %rd4, %r1, 16;
    add.s64 %rd5, %rd1, %rd4;
    ld.global.v4.b32 {%r2, %r3, %r4, %r5}, [%rd5];
    mov.u32 %r6, tile;
    shl.b32 %r7, %r1, 4;
    add.s32 %r8, %r6, %r7;
    st.shared.v4.b32 [%r8], {%r2, %r3, %r4, %r5};
    bar.sync 0;
    mul.wide.u32 %rd6, %r1, 4;
    add.s64 %rd7, %rd2, %rd6;
    ld.global.u32 %r9, [%rd7];
    add.s32 %r10, %r6, %r9;
    ldmatrix.sync.aligned.m8n8.x)",
                      num, trans ? ".trans" : "", ".shared.b16 ", vec, R"(, [%r10];
    add.s64 %rd9, %rd3, %rd4;
    )",
                      store, R"(;
    ret;
}
)");
}

std::string BF16Tile() {
  return absl::StrReplaceAll(ReadPtx("mma_tile"), {{".f16.f16.", ".bf16.bf16."}});
}

// ---- the tests ----

struct MmaCase {
  int k;
  bool bf16;
};
const MmaCase kMmaCases[] = {{16, false}, {16, true}, {8, false}, {8, true}};

std::string CaseName(const MmaCase& c) {
  return absl::StrCat("m16n8k", c.k, c.bf16 ? " bf16" : " f16");
}

TEST(EmuTensor, MmaFragmentLayoutsFollowTheIsa) {
  for (const MmaCase& mc : kMmaCases) {
    SCOPED_TRACE(CaseName(mc));
    const int k = mc.k;
    std::mt19937 rng(k * 2 + mc.bf16);
    const std::vector<float> a = Exact(rng, 16 * k), b = Exact(rng, k * 8), c = Exact(rng, 128);
    std::vector<uint32_t> frag(32 * 16, 0);
    for (int lane = 0; lane < 32; ++lane) {
      uint32_t* w = &frag[lane * 16];
      for (int i = 0; i < k / 2; ++i) {
        const Pos p = IsaA(k, lane, i);
        w[i / 2] |= uint32_t{ToHalf(a[p.row * k + p.col], mc.bf16)} << (16 * (i % 2));
      }
      for (int i = 0; i < k / 4; ++i) {
        const Pos p = IsaB(k, lane, i);
        w[4 + i / 2] |= uint32_t{ToHalf(b[p.row * 8 + p.col], mc.bf16)} << (16 * (i % 2));
      }
      for (int i = 0; i < 4; ++i) {
        const Pos p = IsaC(lane, i);
        w[8 + i] = F32ToBits(c[p.row * 8 + p.col]);
      }
    }
    Emulator emu;
    auto m = emu.LoadModule(MmaFragmentKernel(k, mc.bf16));
    ASSERT_TRUE(m.ok()) << m.status();
    const uint64_t dfrag = Upload(emu, frag), dout = *emu.Alloc(32 * 16);
    ASSERT_TRUE(emu.Launch(*emu.GetFunction(*m, "mma_fragments"), {1, 1, 1}, {32, 1, 1}, 0,
                           {Ptr(dfrag), Ptr(dout)})
                    .ok());
    const auto out = Download<float>(emu, dout, 32 * 4);
    const std::vector<float> d = RefMma(k, a, b, c);
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 4; ++i) {
        const Pos p = IsaC(lane, i);
        ASSERT_EQ(out[lane * 4 + i], d[p.row * 8 + p.col]) << "lane " << lane << " d" << i;
      }
    }
  }
}

TEST(EmuTensor, MmaPropagatesNaNAsTheCanonicalPattern) {
  std::vector<uint32_t> frag(32 * 16, 0);  // A = B = C = 0 ...
  frag[0] = 0x7c00;                        // ... but a0 of lane 0 (A[0][0]) = +inf in f16
  Emulator emu;
  auto m = emu.LoadModule(MmaFragmentKernel(16, false));
  ASSERT_TRUE(m.ok()) << m.status();
  const uint64_t dfrag = Upload(emu, frag), dout = *emu.Alloc(32 * 16);
  ASSERT_TRUE(emu.Launch(*emu.GetFunction(*m, "mma_fragments"), {1, 1, 1}, {32, 1, 1}, 0,
                         {Ptr(dfrag), Ptr(dout)})
                  .ok());
  const auto out = Download<uint32_t>(emu, dout, 32 * 4);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const bool row0 = IsaC(lane, i).row == 0;  // inf * 0 lands in row 0 only
      EXPECT_EQ(out[lane * 4 + i], row0 ? 0x7fffffffu : 0u) << lane << " " << i;
    }
  }
}

TEST(EmuTensor, LdmatrixFragmentsFollowTheIsa) {
  // 32 rows of eight distinct 16-bit values, stored in shared memory in order; lane l's
  // row address points at row perm[l], so matrix i, row r is memory row perm[8 i + r].
  std::vector<uint16_t> rows(32 * 8);
  std::iota(rows.begin(), rows.end(), uint16_t{0x100});
  std::vector<uint32_t> perm(32);
  std::iota(perm.begin(), perm.end(), 0u);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  for (int num : {1, 2, 4}) {
    for (bool trans : {false, true}) {
      SCOPED_TRACE(absl::StrCat(".x", num, trans ? ".trans" : ""));
      // Lanes past the last matrix supply no address: theirs are misaligned on purpose.
      std::vector<uint32_t> offset(32, 3);
      for (int l = 0; l < 8 * num; ++l) offset[l] = 16 * perm[l];
      Emulator emu;
      auto m = emu.LoadModule(LdmatrixKernel(num, trans));
      ASSERT_TRUE(m.ok()) << m.status();
      const uint64_t drows = Upload(emu, rows), doff = Upload(emu, offset);
      const uint64_t dout = *emu.Alloc(32 * 16);
      ASSERT_TRUE(emu.Launch(*emu.GetFunction(*m, "ldmatrix_rows"), {1, 1, 1}, {32, 1, 1}, 0,
                             {Ptr(drows), Ptr(doff), Ptr(dout)})
                      .ok());
      const auto out = Download<uint32_t>(emu, dout, 32 * 4);
      for (int laneid = 0; laneid < 32; ++laneid) {
        for (int i = 0; i < num; ++i) {
          // Matrix i as the ISA defines it: element (r, c) of rows addressed by lanes 8i..8i+7,
          // or with .trans (column-major) element (c, r) of those rows.
          auto element = [&](int r, int c) {
            const int mem_row = static_cast<int>(perm[8 * i + (trans ? c : r)]);
            return rows[mem_row * 8 + (trans ? r : c)];
          };
          // A group of four threads holds one row; thread laneid % 4 of the group its
          // two consecutive elements, the first in the low half.
          const int row = laneid / 4, col = 2 * (laneid % 4);
          const uint32_t want = element(row, col) | uint32_t{element(row, col + 1)} << 16;
          ASSERT_EQ(out[laneid * 4 + i], want) << "lane " << laneid << " matrix " << i;
        }
      }
    }
  }
}

void RunTile(const std::string& ptx, bool bf16) {
  std::mt19937 rng(bf16 ? 11 : 10);
  const std::vector<float> a = Exact(rng, 16 * 16), b = Exact(rng, 16 * 8), c = Exact(rng, 128);
  std::vector<uint16_t> ah(a.size()), bh(b.size());
  for (size_t i = 0; i < a.size(); ++i) ah[i] = ToHalf(a[i], bf16);
  for (size_t i = 0; i < b.size(); ++i) bh[i] = ToHalf(b[i], bf16);
  Emulator emu;
  auto m = emu.LoadModule(ptx);
  ASSERT_TRUE(m.ok()) << m.status();
  const uint64_t da = Upload(emu, ah), db = Upload(emu, bh), dc = Upload(emu, c);
  const uint64_t d16 = *emu.Alloc(128 * 4), d8 = *emu.Alloc(128 * 4);
  const absl::Status st = emu.Launch(*emu.GetFunction(*m, "mma_tile"), {1, 1, 1}, {32, 1, 1}, 0,
                                     {Ptr(da), Ptr(db), Ptr(dc), Ptr(d16), Ptr(d8)});
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<float> want = RefMma(16, a, b, c);
  EXPECT_EQ(Download<float>(emu, d16, 128), want);
  EXPECT_EQ(Download<float>(emu, d8, 128), want);
}

TEST(EmuTensor, TileFromGlobalMemoryMatchesReferenceMatmulF16) {
  RunTile(ReadPtx("mma_tile"), false);
}

TEST(EmuTensor, TileFromGlobalMemoryMatchesReferenceMatmulBF16) { RunTile(BF16Tile(), true); }

TEST(EmuTensor, MmaNeedsTheWholeWarp) {
  Emulator emu;
  auto m = emu.LoadModule(MmaFragmentKernel(16, false));
  ASSERT_TRUE(m.ok()) << m.status();
  const uint64_t dfrag = Upload(emu, std::vector<uint32_t>(16 * 16, 0));
  const uint64_t dout = *emu.Alloc(16 * 16);
  const absl::Status st = emu.Launch(*emu.GetFunction(*m, "mma_fragments"), {1, 1, 1}, {16, 1, 1},
                                     0, {Ptr(dfrag), Ptr(dout)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("kernel mma_fragments"));
  EXPECT_THAT(st.message(), HasSubstr("mma executed by lanes 0x0000ffff only"));
}

TEST(EmuTensor, LdmatrixRowAddressesAreChecked) {
  std::vector<uint32_t> offset(32, 0);
  offset[5] = 8;  // row 5 of matrix 0 is not 16-byte aligned
  Emulator emu;
  auto m = emu.LoadModule(LdmatrixKernel(4, false));
  ASSERT_TRUE(m.ok()) << m.status();
  const uint64_t drows = Upload(emu, std::vector<uint16_t>(32 * 8, 0));
  const uint64_t doff = Upload(emu, offset), dout = *emu.Alloc(32 * 16);
  absl::Status st = emu.Launch(*emu.GetFunction(*m, "ldmatrix_rows"), {1, 1, 1}, {32, 1, 1}, 0,
                               {Ptr(drows), Ptr(doff), Ptr(dout)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("thread (5,0,0)"));
  EXPECT_THAT(st.message(), HasSubstr("misaligned ldmatrix row load"));
  offset[5] = 512;  // one row past the tile
  ASSERT_TRUE(emu.CopyHtoD(doff, offset.data(), offset.size() * 4).ok());
  st = emu.Launch(*emu.GetFunction(*m, "ldmatrix_rows"), {1, 1, 1}, {32, 1, 1}, 0,
                  {Ptr(drows), Ptr(doff), Ptr(dout)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("out-of-bounds shared ldmatrix row load"));
}

// LoadModule's status for `body` in a kernel with registers %r0..7, %f0..7 and %rd0..1.
absl::Status LoadStatus(const std::string& version, const std::string& target,
                        const std::string& body) {
  Emulator emu;
  return emu
      .LoadModule(absl::StrCat(".version ", version, "\n.target ", target,
                               "\n.address_size 64\n.visible .entry k()\n{\n"
                               ".reg .b32 %r<8>;\n.reg .f32 %f<8>;\n.reg .b64 %rd<2>;\n",
                               body, "\n}\n"))
      .status();
}

TEST(EmuTensor, UnsupportedTensorFormsAreRejectedAtLoad) {
  const absl::Status f16_acc = LoadStatus(
      "7.8", "sm_80",
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%r0, %r1}, {%r2, %r3, %r4, %r5}, "
      "{%r6, %r7}, {%r0, %r1};");
  EXPECT_THAT(f16_acc.message(), HasSubstr("PTX line 9"));
  EXPECT_THAT(f16_acc.message(), HasSubstr("supported: mma.sync.aligned.m16n8k16"));
  EXPECT_THAT(
      LoadStatus("7.8", "sm_80", "ldmatrix.sync.aligned.m8n8.x3.shared.b16 {%r0, %r1, %r2}, [%r3];")
          .message(),
      HasSubstr("unsupported modifier '.x3'"));
  EXPECT_THAT(LoadStatus("7.8", "sm_80",
                         "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0, %f1, %f2, %f3}, "
                         "{%r0, %r1}, {%r2, %r3}, {%f4, %f5, %f6, %f7};")
                  .message(),
              HasSubstr("operand a needs a vector of 4 registers"));
}

// As ptxas does: sm_75 has ldmatrix and f16 m16n8k8 (ISA 6.5), sm_80 mma's other forms and
// cp.async (ISA 7.0); some modifiers need a newer ISA.
TEST(EmuTensor, InstructionsNewerThanTheModuleAreRejectedAtLoad) {
  const std::string k8 =
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%f0, %f1, %f2, %f3}, "
      "{%r0, %r1}, {%r2}, {%f4, %f5, %f6, %f7};";
  const std::string k16 =
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0, %f1, %f2, "
      "%f3}, {%r0, %r1, %r2, %r3}, {%r4, %r5}, {%f4, %f5, %f6, %f7};";
  EXPECT_TRUE(LoadStatus("6.5", "sm_75", k8).ok());
  EXPECT_TRUE(
      LoadStatus("6.5", "sm_75", "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r0}, [%r1];").ok());
  EXPECT_THAT(LoadStatus("7.0", "sm_75", k16).message(),
              HasSubstr("needs .target sm_80 or newer, the module has sm_75"));
  EXPECT_THAT(LoadStatus("6.5", "sm_80", k16).message(),
              HasSubstr("needs PTX ISA 7.0 or newer, the module has .version 6.5"));
  EXPECT_THAT(LoadStatus("7.8", "sm_75", "cp.async.commit_group;").message(),
              HasSubstr("needs .target sm_80"));
  EXPECT_THAT(
      LoadStatus("7.0", "sm_80", "ldmatrix.sync.aligned.m8n8.x1.shared::cta.b16 {%r0}, [%r1];")
          .message(),
      HasSubstr("needs PTX ISA 7.8"));
  EXPECT_TRUE(LoadStatus("7.4", "sm_80", "cp.async.ca.shared.global [%r0], [%rd1], 4, %r1;").ok());
  EXPECT_THAT(LoadStatus("7.4", "sm_80",
                         ".reg .pred %p<2>;\ncp.async.ca.shared.global [%r0], [%rd1], 4, %p1;")
                  .message(),
              HasSubstr("needs PTX ISA 7.5"));  // ignore-src
}

TEST(EmuTensorPtxas, GeneratedKernelsAssemble) {
  const std::string ptxas = kernels::testing::FindPtxas();
  if (ptxas.empty()) {
    if (kernels::testing::InCi()) FAIL() << "ptxas not found and CI=true";
    GTEST_SKIP() << "ptxas not found on PATH or in /usr/local/cuda/bin: the generated tensor "
                    "kernels are not checked against the real assembler";
  }
  std::vector<kernels::testing::PtxModule> modules;
  for (const MmaCase& mc : kMmaCases) {
    modules.push_back({CaseName(mc), MmaFragmentKernel(mc.k, mc.bf16)});
  }
  for (int num : {1, 2, 4}) {
    for (bool trans : {false, true}) {
      modules.push_back({absl::StrCat("ldmatrix x", num, trans), LdmatrixKernel(num, trans)});
    }
  }
  modules.push_back({"bf16 tile", BF16Tile()});
  for (const char* arch : {"sm_80", "sm_90"}) {
    const auto r = kernels::testing::AssembleAll(ptxas, modules, arch);
    EXPECT_TRUE(r.ok) << arch << ":\n" << r.log;
  }
}

}  // namespace
}  // namespace ptxserve::emu::testing
