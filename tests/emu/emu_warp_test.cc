// Warp-level behaviour: shuffles (including the missing-broadcast trap), votes, block
// reductions through shared memory and barriers, named barriers, and throughput on a
// realistic GEMV.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "tests/emu/emu_test_util.h"

namespace ptxserve::emu::testing {
namespace {

std::vector<float> Iota(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 97) * scale;
  return v;
}

TEST(EmuWarp, ShflDownReductionThenBroadcast) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "warp_reduce", "warp_sum_broadcast");
  const auto in = Iota(128, 0.25f);  // 4 warps; small integers times 1/4 sum exactly
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(128 * 4);
  ASSERT_TRUE(emu.Launch(f, {2, 1, 1}, {64, 1, 1}, 0, {Ptr(din), Ptr(out)}).ok());
  const auto v = Download<float>(emu, out, 128);
  for (int w = 0; w < 4; ++w) {
    const float sum = std::accumulate(in.begin() + 32 * w, in.begin() + 32 * (w + 1), 0.0f);
    for (int l = 0; l < 32; ++l) EXPECT_EQ(v[32 * w + l], sum) << "warp " << w << " lane " << l;
  }
}

// Without the shfl.idx broadcast only lane 0 holds the warp total: the emulator must show
// the other lanes' partial sums, exactly as the hardware does.
TEST(EmuWarp, MissingBroadcastGivesWrongResultsOutsideLaneZero) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "warp_reduce", "warp_sum_no_broadcast");
  const auto in = Iota(32, 1.0f);
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(32 * 4);
  ASSERT_TRUE(emu.Launch(f, {1, 1, 1}, {32, 1, 1}, 0, {Ptr(din), Ptr(out)}).ok());
  const auto v = Download<float>(emu, out, 32);
  const float sum = std::accumulate(in.begin(), in.end(), 0.0f);
  EXPECT_EQ(v[0], sum);
  for (int l = 1; l < 32; ++l) EXPECT_NE(v[l], sum) << "lane " << l;
  // Reference model of shfl.down with clamp 31: a lane past 31 keeps its own value.
  std::vector<float> x = in;
  for (int off = 16; off >= 1; off /= 2) {
    std::vector<float> y = x;
    for (int l = 0; l < 32; ++l) y[l] = x[l] + (l + off <= 31 ? x[l + off] : x[l]);
    x = y;
  }
  for (int l = 0; l < 32; ++l) EXPECT_EQ(v[l], x[l]) << "lane " << l;
}

TEST(EmuWarp, ButterflyAndScan) {
  Emulator emu;
  const auto in = Iota(32, 1.0f);
  const float sum = std::accumulate(in.begin(), in.end(), 0.0f);
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(32 * 4);
  ASSERT_TRUE(emu.Launch(Load(emu, "warp_reduce", "warp_sum_bfly"), {1, 1, 1}, {32, 1, 1}, 0,
                         {Ptr(din), Ptr(out)})
                  .ok());
  for (float x : Download<float>(emu, out, 32)) EXPECT_EQ(x, sum);

  std::vector<uint32_t> ints(32);
  for (uint32_t i = 0; i < 32; ++i) ints[i] = i * i + 1;
  const uint64_t dints = Upload(emu, ints);
  ASSERT_TRUE(emu.Launch(Load(emu, "warp_reduce", "warp_scan"), {1, 1, 1}, {32, 1, 1}, 0,
                         {Ptr(dints), Ptr(out)})
                  .ok());
  const auto scan = Download<uint32_t>(emu, out, 32);
  uint32_t acc = 0;
  for (int l = 0; l < 32; ++l) {
    acc += ints[l];
    EXPECT_EQ(scan[l], acc) << l;
  }
}

TEST(EmuWarp, VotesReduxAndActiveMask) {
  Emulator emu;
  std::vector<int32_t> in(32);
  for (int i = 0; i < 32; ++i) in[i] = (i * 37) % 50 - 3;
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(8 * 4);
  ASSERT_TRUE(emu.Launch(Load(emu, "vote"), {1, 1, 1}, {32, 1, 1}, 0, {Ptr(din), Ptr(out)}).ok());
  const auto v = Download<uint32_t>(emu, out, 8);
  uint32_t ballot = 0;
  bool all = true, gt_all = true, gt_none = true;
  uint32_t sum = 0;
  int32_t mx = INT32_MIN;
  for (int i = 0; i < 32; ++i) {
    if (i % 3 == 0) ballot |= 1u << i;
    all = all && in[i] >= 0;
    gt_all = gt_all && in[i] > 0;
    gt_none = gt_none && !(in[i] > 0);
    sum += static_cast<uint32_t>(in[i]);
    mx = std::max(mx, in[i]);
  }
  EXPECT_EQ(v[0], ballot);
  EXPECT_EQ(v[1], all ? 1u : 0u);
  EXPECT_EQ(v[2], 1u);
  EXPECT_EQ(v[3], (gt_all || gt_none) ? 1u : 0u);
  EXPECT_EQ(v[4], 0x55555555u);
  EXPECT_EQ(v[5], sum);
  EXPECT_EQ(static_cast<int32_t>(v[6]), mx);
  EXPECT_EQ(v[7], 0xfu);
}

TEST(EmuWarp, BlockReductionWithBarriers) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "block_reduce");
  const uint32_t n = 1000;  // 4 blocks, the last one partial
  const auto in = Iota(n, 0.5f);
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(4 * 4);
  ASSERT_TRUE(emu.Launch(f, {4, 1, 1}, {256, 1, 1}, 0, {Ptr(din), Ptr(out), U32(n)}).ok());
  const auto v = Download<float>(emu, out, 4);
  for (uint32_t b = 0; b < 4; ++b) {
    float sum = 0;
    for (uint32_t i = b * 256; i < std::min(n, (b + 1) * 256); ++i) sum += in[i];
    EXPECT_EQ(v[b], sum) << b;
  }
  // .reqntid 256 is enforced.
  EXPECT_FALSE(emu.Launch(f, {4, 1, 1}, {128, 1, 1}, 0, {Ptr(din), Ptr(out), U32(n)}).ok());
}

TEST(EmuWarp, NamedBarrierWithThreadCount) {
  Emulator emu;
  const uint64_t out = *emu.Alloc(64 * 4);
  ASSERT_TRUE(
      emu.Launch(Load(emu, "block_reduce", "named_barrier"), {1, 1, 1}, {128, 1, 1}, 0, {Ptr(out)})
          .ok());
  const auto v = Download<uint32_t>(emu, out, 64);
  for (uint32_t i = 0; i < 64; ++i) EXPECT_EQ(v[i], (i ^ 32) * 3) << i;
}

TEST(EmuWarp, BlocksRunOnSeveralHostThreadsWithSameResults) {
  for (int threads : {1, 2, 3}) {
    EmulatorOptions opts;
    opts.num_threads = threads;
    Emulator emu(opts);
    const FunctionHandle f = Load(emu, "block_reduce");
    const uint32_t n = 64 * 256 - 17;
    const auto in = Iota(n, 1.0f);
    const uint64_t din = Upload(emu, in), out = *emu.Alloc(64 * 4);
    ASSERT_TRUE(emu.Launch(f, {64, 1, 1}, {256, 1, 1}, 0, {Ptr(din), Ptr(out), U32(n)}).ok());
    const auto v = Download<float>(emu, out, 64);
    for (uint32_t b = 0; b < 64; ++b) {
      float sum = 0;
      for (uint32_t i = b * 256; i < std::min(n, (b + 1) * 256); ++i) sum += in[i];
      ASSERT_EQ(v[b], sum) << "block " << b << " threads " << threads;
    }
  }
}

// A realistic kernel over 1M matrix elements; prints the emulator's throughput (no timing
// assertion: CI machines vary).
TEST(EmuWarp, GemvThroughput) {
  EmulatorOptions opts;
  opts.num_threads = 1;
  Emulator emu(opts);
  const FunctionHandle f = Load(emu, "gemv");
  const uint32_t rows = 1024, cols = 1024;
  std::vector<float> a(size_t{rows} * cols), x(cols);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 7) % 13) - 6.0f;
  for (uint32_t j = 0; j < cols; ++j) x[j] = static_cast<float>(j % 5) * 0.5f;
  const uint64_t da = Upload(emu, a), dx = Upload(emu, x), dy = *emu.Alloc(rows * 4);
  // Best of three launches: the machine may be shared.
  double sec = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(emu.Launch(f, {rows / 8, 1, 1}, {256, 1, 1}, 0,
                           {Ptr(da), Ptr(dx), Ptr(dy), U32(rows), U32(cols)})
                    .ok());
    sec =
        std::min(sec, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const auto y = Download<float>(emu, dy, rows);
  for (uint32_t r = 0; r < rows; ++r) {
    double ref = 0;
    for (uint32_t j = 0; j < cols; ++j) ref += double{a[size_t{r} * cols + j]} * x[j];
    ASSERT_NEAR(y[r], ref, 1e-3 * (1 + std::fabs(ref))) << r;
  }
  const EmulatorStats s = emu.stats();
  const double warp = s.warp_instructions / 3.0, thread = s.thread_instructions / 3.0;
  std::printf(
      "gemv 1024x1024 (1M elements), one host thread: %.4f s per launch, %.0f "
      "warp-instructions (%.1f M/s), %.0f thread-instructions (%.1f M/s)\n",
      sec, warp, warp / sec / 1e6, thread, thread / sec / 1e6);
}

}  // namespace
}  // namespace ptxserve::emu::testing
