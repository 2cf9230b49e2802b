// Basic execution: vector add with a bounds guard, multi-dimensional grids, comparisons
// and predicated branches, integer ALU semantics, divergence, dynamic shared memory,
// cp.async, and the parser's handling of PTX syntax.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/emu/fp16.h"
#include "tests/emu/emu_test_util.h"

namespace ptxserve::emu::testing {
namespace {

TEST(PtxEmulator, VectorAddWithBoundsGuard) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "vector_add");
  const uint32_t n = 1000;  // not a multiple of the block
  std::vector<float> a(n), b(n);
  for (uint32_t i = 0; i < n; ++i) {
    a[i] = 0.5f * i;
    b[i] = 1000.0f - i;
  }
  const uint64_t da = Upload(emu, a), db = Upload(emu, b);
  const uint64_t dc = *emu.Alloc(n * 4);
  ASSERT_TRUE(
      emu.Launch(f, {(n + 255) / 256, 1, 1}, {256, 1, 1}, 0, {Ptr(da), Ptr(db), Ptr(dc), U32(n)})
          .ok());
  const auto c = Download<float>(emu, dc, n);
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(c[i], a[i] + b[i]) << i;
  const EmulatorStats s = emu.stats();
  EXPECT_EQ(s.launches, 1u);
  EXPECT_EQ(s.warp_instructions > 0, true);
  // 1024 threads run the 10-instruction prologue and the ret; 1000 of them the 11 between.
  EXPECT_EQ(s.thread_instructions, 1024u * 11 + 1000u * 11);
}

TEST(PtxEmulator, MultiDimensionalGrid) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "grid3d");
  const Dim3 grid{3, 2, 2}, block{5, 4, 3};  // 60 threads per block: a partial second warp
  const uint32_t nthreads = 3 * 2 * 2 * 5 * 4 * 3;
  const uint64_t out = *emu.Alloc(nthreads * 16);
  ASSERT_TRUE(emu.Launch(f, grid, block, 0, {Ptr(out)}).ok());
  const auto v = Download<uint32_t>(emu, out, nthreads * 4);
  for (uint32_t bz = 0; bz < 2; ++bz) {
    for (uint32_t by = 0; by < 2; ++by) {
      for (uint32_t bx = 0; bx < 3; ++bx) {
        for (uint32_t t = 0; t < 60; ++t) {
          const uint32_t tx = t % 5, ty = (t / 5) % 4, tz = t / 20;
          const uint32_t g = ((bz * 2 + by) * 3 + bx) * 60 + t;
          ASSERT_EQ(v[4 * g], bx | by << 8 | bz << 16) << g;
          ASSERT_EQ(v[4 * g + 1], tx | ty << 8 | tz << 16) << g;
          ASSERT_EQ(v[4 * g + 2], (t % 32) | (t / 32) << 8) << g;
          ASSERT_EQ(v[4 * g + 3], nthreads) << g;
        }
      }
    }
  }
}

TEST(PtxEmulator, SetpSelpAndPredicatedBranches) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "compare");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<float, float>> fp = {{1, 2},   {2, 1},        {3, 3},   {nan, 1},
                                                   {1, nan}, {-0.0f, 0.0f}, {-5, -7}, {nan, nan}};
  const std::vector<std::pair<int32_t, int32_t>> ip = {
      {1, 2}, {2, 1}, {3, 3}, {-1, 1}, {1, -1}, {INT32_MIN, INT32_MAX}, {-5, -7}, {0, 0}};
  const size_t n = fp.size();
  std::vector<float> fin;
  std::vector<int32_t> iin;
  for (size_t i = 0; i < n; ++i) {
    fin.push_back(fp[i].first);
    fin.push_back(fp[i].second);
    iin.push_back(ip[i].first);
    iin.push_back(ip[i].second);
  }
  const uint64_t dfin = Upload(emu, fin), diin = Upload(emu, iin), out = *emu.Alloc(n * 16);
  ASSERT_TRUE(emu.Launch(f, {1, 1, 1}, {static_cast<uint32_t>(n), 1, 1}, 0,
                         {Ptr(dfin), Ptr(diin), Ptr(out)})
                  .ok());
  const auto v = Download<uint32_t>(emu, out, n * 4);
  for (size_t i = 0; i < n; ++i) {
    const float x = fp[i].first, y = fp[i].second;
    const bool u = std::isnan(x) || std::isnan(y);
    const bool fc[14] = {
        x == y,     x != y && !u, x<y, x <= y, x> y, x >= y,      x == y || u, x != y,
        x < y || u, x <= y || u,  x > y || u,        x >= y || u, !u,          u};
    uint32_t fbits = 0;
    for (int k = 0; k < 14; ++k) fbits |= static_cast<uint32_t>(fc[k]) << k;
    EXPECT_EQ(v[4 * i], fbits) << "float pair " << i;
    const int32_t c = ip[i].first, d = ip[i].second;
    const uint32_t uc = static_cast<uint32_t>(c), ud = static_cast<uint32_t>(d);
    const bool ic[10] = {c == d,  c != d, c<d, c <= d, c> d, c >= d, uc<ud, uc <= ud, uc> ud,
                         uc >= ud};
    uint32_t ibits = 0;
    for (int k = 0; k < 10; ++k) ibits |= static_cast<uint32_t>(ic[k]) << k;
    EXPECT_EQ(v[4 * i + 1], ibits) << "int pair " << i;
    EXPECT_EQ(static_cast<int32_t>(v[4 * i + 2]), x < y ? c : d) << i;
    const bool lt = x < y;
    const uint32_t misc =
        static_cast<uint32_t>((c < d) && lt) | static_cast<uint32_t>(!(c < d) && lt) << 1 |
        static_cast<uint32_t>((c > d) || !(x == y)) << 2 | static_cast<uint32_t>(c != d) << 3;
    EXPECT_EQ(v[4 * i + 3], misc) << i;
  }
}

TEST(PtxEmulator, IntegerSemantics) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "int_ops");
  const std::vector<std::pair<int32_t, int32_t>> in = {{7, 3},
                                                       {-7, 3},
                                                       {7, -3},
                                                       {INT32_MIN, -1},
                                                       {123456789, 987654},
                                                       {-1, 40},
                                                       {0x12345678, 0x9abcdef0},
                                                       {5, 0},
                                                       {INT32_MAX, 1},
                                                       {INT32_MIN, -5}};
  std::vector<int32_t> flat;
  for (auto [a, b] : in) {
    flat.push_back(a);
    flat.push_back(b);
  }
  const uint32_t n = static_cast<uint32_t>(in.size());
  const uint64_t din = Upload(emu, flat), out = *emu.Alloc(n * 64);
  ASSERT_TRUE(emu.Launch(f, {1, 1, 1}, {n, 1, 1}, 0, {Ptr(din), Ptr(out)}).ok());
  const auto v = Download<uint32_t>(emu, out, n * 16);
  for (uint32_t i = 0; i < n; ++i) {
    const int32_t a = in[i].first, b = in[i].second;
    const uint32_t ua = static_cast<uint32_t>(a), ub = static_cast<uint32_t>(b);
    const uint32_t* r = &v[16 * i];
    const int64_t wide = int64_t{a} * b;
    EXPECT_EQ(r[0], static_cast<uint32_t>(wide >> 32)) << i;
    EXPECT_EQ(r[1], static_cast<uint32_t>((uint64_t{ua} * ub) >> 32)) << i;
    EXPECT_EQ(r[2], static_cast<uint32_t>(wide)) << i;
    EXPECT_EQ(r[3], static_cast<uint32_t>(static_cast<uint64_t>(wide) >> 32)) << i;
    if (b != 0 && !(a == INT32_MIN && b == -1)) {
      EXPECT_EQ(static_cast<int32_t>(r[4]), a / b) << i;
      EXPECT_EQ(static_cast<int32_t>(r[5]), a % b) << i;
    }
    if (b != 0) {
      EXPECT_EQ(r[6], ua / ub) << i;
      EXPECT_EQ(r[7], ua % ub) << i;
    }
    EXPECT_EQ(static_cast<int32_t>(r[8]), a >> (b & 31)) << i;
    EXPECT_EQ(r[9], 0u) << i;  // shr.u32 by 33 clamps to 0
    EXPECT_EQ(static_cast<int32_t>(r[10]), static_cast<int8_t>((ua >> 4) & 0xff)) << i;
    EXPECT_EQ(r[11], (ua & ~(0xfffu << 8)) | ((ub & 0xfff) << 8)) << i;
    // prmt 0x7531 picks bytes 1, 3, 5, 7 of {b, a}.
    const uint64_t bytes = (uint64_t{ub} << 32) | ua;
    uint32_t prmt = 0;
    const int sel[4] = {1, 3, 5, 7};
    for (int k = 0; k < 4; ++k) prmt |= ((bytes >> (8 * sel[k])) & 0xff) << (8 * k);
    EXPECT_EQ(r[12], prmt) << i;
    uint32_t rev = 0;
    for (int k = 0; k < 32; ++k) rev |= ((ua >> k) & 1u) << (31 - k);
    const uint32_t clz = ua == 0 ? 32 : static_cast<uint32_t>(__builtin_clz(ua));
    EXPECT_EQ(r[13], static_cast<uint32_t>(__builtin_popcount(ua)) | clz << 8 | (rev & 0xffff0000u))
        << i;
    EXPECT_EQ(r[14], static_cast<uint32_t>(std::min(a, b)) ^ std::max(ua, ub)) << i;
    const int64_t sum = int64_t{a} + b;
    EXPECT_EQ(static_cast<int32_t>(r[15]),
              static_cast<int32_t>(std::clamp<int64_t>(sum, INT32_MIN, INT32_MAX)))
        << i;
  }
}

TEST(PtxEmulator, DivergentLoopsAndBranchesReconverge) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "diverge");
  const uint64_t out = *emu.Alloc(32 * 4);
  ASSERT_TRUE(emu.Launch(f, {1, 1, 1}, {32, 1, 1}, 0, {Ptr(out)}).ok());
  const auto v = Download<int32_t>(emu, out, 32);
  auto value = [](int l) {
    int s = (l + 1) * (l + 2) / 2;
    if (l % 2 == 1) return s * 3;
    return l % 4 == 0 ? s + 100 : s - 1;
  };
  for (int l = 0; l < 32; ++l) EXPECT_EQ(v[l], value(l ^ 1)) << l;
}

TEST(PtxEmulator, DynamicSharedMemoryAndGenericAddresses) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "dyn_shared");
  const uint32_t n = 96;
  const uint64_t out = *emu.Alloc(n * 4);
  ASSERT_TRUE(emu.Launch(f, {1, 1, 1}, {n, 1, 1}, n * 4, {Ptr(out)}).ok());
  const auto v = Download<uint32_t>(emu, out, n);
  for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(v[i], 2 * (n - 1 - i)) << i;
  // Too little dynamic shared memory for the block: the generic store overruns it.
  const absl::Status st = emu.Launch(f, {1, 1, 1}, {n, 1, 1}, n * 2, {Ptr(out)});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("out-of-bounds shared store"), std::string::npos) << st;
}

TEST(PtxEmulator, CpAsyncThroughSharedMemory) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "cp_async");
  const uint32_t threads = 64;
  std::vector<float> in(threads * 4);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 1.5f;
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(in.size() * 4);
  ASSERT_TRUE(emu.Launch(f, {1, 1, 1}, {threads, 1, 1}, 0, {Ptr(din), Ptr(out)}).ok());
  const auto v = Download<float>(emu, out, in.size());
  for (uint32_t t = 0; t < threads; ++t) {
    for (int k = 0; k < 4; ++k) EXPECT_EQ(v[4 * t + k], in[4 * (t ^ 1) + k]) << t;
  }
}

// Syntax the parser must accept: block comments, nested scopes that shadow registers,
// register ranges, 0f/0d and decimal float literals, [reg+-imm], labels with $ and _,
// `@!%p`, mov of a special register into a 64-bit register via cvt, .pragma.
TEST(PtxEmulator, ParsesPtxSyntax) {
  const std::string ptx = R"(
.version 8.0
.target sm_90
.address_size 64
/* multi-line
   comment */
.visible .entry syntax_mix(
    .param .u64 .ptr .global .align 4 out   // pointer attributes
)
.maxntid 64, 1, 1
{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .f32 %f<12>;
    .reg .f64 %fd<2>;
    .reg .b64 %rd<4>;
    .pragma "nounroll";
    ld.param.u64 %rd1, [out];
    add.s64 %rd1, %rd1, 8;
    mov.f32 %f1, 0f3FC00000;            // 1.5
    mov.f64 %fd1, 0d4004000000000000;   // 2.5
    cvt.rn.f32.f64 %f2, %fd1;
    mov.f32 %f3, 0.25;
    {
        .reg .f32 %f1;                  // shadows the outer %f1
        mov.f32 %f1, 0f41200000;        // 10
        add.f32 %f4, %f1, %f3;          // 10.25
    }
    add.f32 %f5, %f1, %f2;              // outer %f1: 4.0
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    @!%p1 bra $L__skip_1;
    st.global.f32 [%rd1+-8], %f4;
    st.global.f32 [%rd1+-4], %f5;
    st.global.f32 [%rd1], %f3;
$L__skip_1:
    ret;
}
)";
  Emulator emu;
  auto m = emu.LoadModule(ptx);
  ASSERT_TRUE(m.ok()) << m.status();
  auto f = emu.GetFunction(*m, "syntax_mix");
  ASSERT_TRUE(f.ok()) << f.status();
  const uint64_t out = *emu.Alloc(12);
  ASSERT_TRUE(emu.Launch(*f, {1, 1, 1}, {64, 1, 1}, 0, {Ptr(out)}).ok());
  const auto v = Download<float>(emu, out, 3);
  EXPECT_EQ(v[0], 10.25f);
  EXPECT_EQ(v[1], 4.0f);
  EXPECT_EQ(v[2], 0.25f);
  // .maxntid is enforced at launch.
  EXPECT_FALSE(emu.Launch(*f, {1, 1, 1}, {65, 1, 1}, 0, {Ptr(out)}).ok());
  auto params = emu.GetParams(*f);
  ASSERT_TRUE(params.ok());
  ASSERT_EQ(params->size(), 1u);
  EXPECT_EQ((*params)[0].name, "out");
  EXPECT_EQ((*params)[0].size, 8u);
}

TEST(PtxEmulator, LaunchRawTakesCuLaunchKernelStyleParams) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "vector_add");
  const uint32_t n = 40;
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  uint64_t da = Upload(emu, a), db = Upload(emu, b), dc = *emu.Alloc(n * 4);
  uint32_t nn = n;
  void* params[] = {&da, &db, &dc, &nn};
  ASSERT_TRUE(emu.LaunchRaw(f, {1, 1, 1}, {64, 1, 1}, 0, params).ok());
  for (float x : Download<float>(emu, dc, n)) EXPECT_EQ(x, 3.0f);
}

}  // namespace
}  // namespace ptxserve::emu::testing

namespace ptxserve::emu::testing {
namespace {

TEST(PtxEmulator, BfindAndFunnelShift) {
  Emulator emu;
  std::vector<uint32_t> in = {0,           1,     0x80000000u, 0xffffffffu,
                              0x00f00000u, 12345, 0x7fffffffu, 0xfffffff0u};
  const uint32_t n = static_cast<uint32_t>(in.size());
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(n * 16);
  ASSERT_TRUE(
      emu.Launch(Load(emu, "bits_barred", "bits"), {1, 1, 1}, {n, 1, 1}, 0, {Ptr(din), Ptr(out)})
          .ok());
  const auto v = Download<uint32_t>(emu, out, n * 4);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t a = in[i], b = in[i ^ 1];
    const uint32_t msb = a == 0 ? 0xffffffffu : 31 - __builtin_clz(a);
    EXPECT_EQ(v[4 * i], msb) << i;
    const int32_t sa = static_cast<int32_t>(a);
    const uint32_t x = sa < 0 ? ~a : a;
    EXPECT_EQ(v[4 * i + 1], x == 0 ? 0xffffffffu : static_cast<uint32_t>(__builtin_clz(x))) << i;
    const uint64_t pair = (uint64_t{b} << 32) | a;
    EXPECT_EQ(v[4 * i + 2], static_cast<uint32_t>((pair << (b & 31)) >> 32)) << i;
    const uint32_t nr = std::min<uint32_t>(b & 63, 32);
    EXPECT_EQ(v[4 * i + 3], static_cast<uint32_t>(pair >> nr)) << i;
  }
}

TEST(PtxEmulator, ReducingBarriers) {
  Emulator emu;
  const uint32_t n = 96;
  std::vector<int32_t> in(n);
  for (uint32_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>((i * 53) % 700);
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(n * 4);
  const FunctionHandle f = Load(emu, "bits_barred", "bar_red");
  ASSERT_TRUE(emu.Launch(f, {1, 1, 1}, {n, 1, 1}, 0, {Ptr(din), Ptr(out)}).ok());
  uint32_t popc = 0;
  for (int32_t x : in) popc += x & 1;
  for (uint32_t x : Download<uint32_t>(emu, out, n)) EXPECT_EQ(x, popc | 0x10000u);
  in[7] = -5;
  in[70] = 5000;
  const uint64_t din2 = Upload(emu, in);
  ASSERT_TRUE(emu.Launch(f, {1, 1, 1}, {n, 1, 1}, 0, {Ptr(din2), Ptr(out)}).ok());
  popc = 0;
  for (int32_t x : in) popc += x & 1;
  for (uint32_t x : Download<uint32_t>(emu, out, n)) EXPECT_EQ(x, popc | 0x20000u);
}

}  // namespace
}  // namespace ptxserve::emu::testing
