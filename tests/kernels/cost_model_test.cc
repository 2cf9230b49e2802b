// The cost model on counters whose answer follows from the device figures by hand: a large
// copy runs at the sustained bandwidth, a tensor-core tile loop at the tensor peak, a lone
// warp is latency-bound, a grid smaller than the SM count gets only its SMs' share, and the
// occupancy limits (warps, registers, shared memory) fall where the programming guide's
// tables put them.
#include "kernels/cost/cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace ptxserve::cost {
namespace {

const DeviceSpec& H100() {
  const DeviceSpec* d = FindDevice("h100");
  EXPECT_NE(d, nullptr);
  return *d;
}

// A grid of `ctas` CTAs of 256 threads whose every warp issues `loads` coalesced 16-byte
// loads per lane (16 sectors each) and as many stores, waiting for them two at a time.
emu::KernelCounters Streaming(uint64_t ctas, uint64_t loads_per_warp) {
  emu::KernelCounters c;
  c.block = {256, 1, 1};
  c.grid = {static_cast<uint32_t>(ctas), 1, 1};
  c.ctas = ctas;
  const uint64_t warps = ctas * 8;
  c.global_load.requests = warps * loads_per_warp;
  c.global_load.sectors = c.global_load.requests * 16;
  c.global_load.ideal_sectors = c.global_load.sectors;
  c.global_store = c.global_load;
  c.dram_read_bytes = c.global_load.sectors * 32;
  c.dram_write_bytes = c.dram_read_bytes;
  c.warp_instructions = warps * loads_per_warp * 6;
  c.load_wait_steps = warps * loads_per_warp / 2 * emu::kLoadLatencySteps;
  return c;
}

TEST(CostModel, DevicesAreFoundByName) {
  EXPECT_NE(FindDevice("a100"), nullptr);
  EXPECT_EQ(FindDevice("h200"), nullptr);
  EXPECT_EQ(DeviceNames(), (std::vector<std::string>{"h100", "a100"}));
}

TEST(CostModel, ALargeCopyRunsAtTheSustainedBandwidth) {
  const DeviceSpec& d = H100();
  // 132 x 64 CTAs of 8 warps, 4 loads of 512 B per warp: 138 MB read, as many written.
  const emu::KernelCounters c = Streaming(132 * 64, 4);
  const Estimate e = EstimateLaunch(d, c, {}, /*in_graph=*/false);
  EXPECT_EQ(e.binding, "dram");
  EXPECT_DOUBLE_EQ(e.dram_bandwidth, d.dram_bytes_per_s * d.dram_efficiency);
  const double bytes = static_cast<double>(c.dram_read_bytes + c.dram_write_bytes);
  EXPECT_NEAR(e.seconds, bytes / (3.35e12 * 0.9) + d.launch_eager_s, 1e-9);
  EXPECT_EQ(e.occupancy.ctas_per_sm, 8);  // 64 warps / 8 per CTA
  EXPECT_EQ(e.waves, 8);
}

TEST(CostModel, AGridTooSmallToFillTheDeviceDrawsWhatItKeepsInFlight) {
  const DeviceSpec& d = H100();
  // 32 CTAs of 8 warps, 2 requests of 512 B in flight per warp: 256 KiB over 600 ns.
  const Estimate e = EstimateLaunch(d, Streaming(32, 64), {}, false);
  EXPECT_EQ(e.binding, "dram");
  EXPECT_NEAR(e.dram_bandwidth, 32 * 8 * 2 * 512 / 600e-9, 1e3);
  EXPECT_LT(e.dram_bandwidth, d.dram_bytes_per_s * d.dram_efficiency / 5);
}

TEST(CostModel, LoadsIssuedTogetherOverlapAndDependentOnesDoNot) {
  const DeviceSpec& d = H100();
  // 32 CTAs of 8 warps, 64 loads of 512 B per warp: waiting for each load on its own keeps
  // one in flight, waiting for eight at a time keeps eight (Little's law).
  emu::KernelCounters c = Streaming(32, 64);
  c.load_wait_steps = 32 * 8 * 64 * emu::kLoadLatencySteps;
  const Estimate one = EstimateLaunch(d, c, {}, false);
  EXPECT_NEAR(one.dram_bandwidth, 32 * 8 * 1 * 512 / 600e-9, 1e3);
  // Its chain: 64 latencies a warp, one wave.
  EXPECT_NEAR(one.latency_s, 64 * 600e-9 + 64 * 6 * 4 / 1.98e9, 1e-12);
  c.load_wait_steps /= 8;
  const Estimate eight = EstimateLaunch(d, c, {}, false);
  EXPECT_NEAR(eight.dram_bandwidth, 32 * 8 * 8 * 512 / 600e-9, 1e3);
  EXPECT_NEAR(eight.latency_s, 8 * 600e-9 + 64 * 6 * 4 / 1.98e9, 1e-12);
  EXPECT_NEAR(one.seconds - one.launch_s, 8 * (eight.seconds - eight.launch_s), 1e-9);
  // A warp that never waits a whole latency keeps every request in flight.
  c.load_wait_steps = 0;
  EXPECT_NEAR(EstimateLaunch(d, c, {}, false).dram_bandwidth,
              std::min(32 * 8 * 64 * 512 / 600e-9, d.dram_bytes_per_s * d.dram_efficiency), 1e3);
}

TEST(CostModel, ALoneWarpIsBoundByItsOwnChain) {
  emu::KernelCounters c;
  c.block = {32, 1, 1};
  c.ctas = 1;
  c.warp_instructions = 10000;
  const Estimate e = EstimateLaunch(H100(), c, {}, /*in_graph=*/true);
  EXPECT_EQ(e.binding, "latency");
  EXPECT_NEAR(e.latency_s, 10000 * 4 / 1.98e9, 1e-12);
  EXPECT_NEAR(e.seconds, e.latency_s + H100().launch_graph_s, 1e-12);
}

// A programmatic dependent launch's overhead hides behind the previous kernel, as far as
// that kernel lasts, except the release; its limits are charged in full.
TEST(CostModel, ADependentLaunchOverlapsThePreviousKernel) {
  const DeviceSpec& d = H100();
  emu::KernelCounters c = Streaming(132 * 64, 4);
  const Estimate plain = EstimateLaunch(d, c, {}, /*in_graph=*/true, /*previous_s=*/10e-6);
  EXPECT_DOUBLE_EQ(plain.launch_s, d.launch_graph_s);
  c.grid_dependent = true;
  const Estimate first = EstimateLaunch(d, c, {}, true, 0);
  EXPECT_DOUBLE_EQ(first.launch_s, d.launch_graph_s);
  const Estimate short_prev = EstimateLaunch(d, c, {}, true, 0.1e-6);
  EXPECT_NEAR(short_prev.launch_s, d.launch_graph_s - 0.1e-6, 1e-15);
  const Estimate long_prev = EstimateLaunch(d, c, {}, true, 10e-6);
  EXPECT_DOUBLE_EQ(long_prev.launch_s, d.dependent_release_s);
  EXPECT_DOUBLE_EQ(long_prev.seconds - long_prev.launch_s, plain.seconds - plain.launch_s);
  EXPECT_GT(d.dependent_release_s, 0);
}

TEST(CostModel, TensorWorkRunsAtThePeakOfTheSmsItOccupies) {
  const DeviceSpec& d = H100();
  emu::KernelCounters c;
  c.block = {128, 1, 1};
  c.ctas = 264;  // two per SM
  c.tensor_flops = 1'000'000'000'000;
  c.warp_instructions = 1000;
  Estimate e = EstimateLaunch(d, c, {}, false);
  EXPECT_EQ(e.binding, "tensor");
  EXPECT_NEAR(e.tensor_s, 1e12 / 989.4e12, 1e-9);
  // 66 CTAs: half the SMs idle, so twice as long for the same work.
  c.ctas = 66;
  e = EstimateLaunch(d, c, {}, false);
  EXPECT_NEAR(e.tensor_s, 2 * 1e12 / 989.4e12, 1e-9);
}

TEST(CostModel, OccupancyFollowsTheProgrammingGuidesLimits) {
  const DeviceSpec& d = H100();
  Occupancy o = ComputeOccupancy(d, 256, 0, 0);  // 32 registers by default
  EXPECT_EQ(o.ctas_per_sm, 8);
  EXPECT_EQ(o.limit, "warps");
  o = ComputeOccupancy(d, 256, 0, 128);  // 4096 registers per warp: 16 warps
  EXPECT_EQ(o.ctas_per_sm, 2);
  EXPECT_EQ(o.limit, "registers");
  o = ComputeOccupancy(d, 256, 0, 80);  // 2,560 per warp: 25 warps, 3 CTAs of 8
  EXPECT_EQ(o.ctas_per_sm, 3);
  o = ComputeOccupancy(d, 256, 0, 83);  // 2,656 rounded up to 2,816: 23 warps
  EXPECT_EQ(o.ctas_per_sm, 2);
  o = ComputeOccupancy(d, 128, 100 * 1024, 32);  // 228 KiB / 101 KiB
  EXPECT_EQ(o.ctas_per_sm, 2);
  EXPECT_EQ(o.limit, "shared memory");
  o = ComputeOccupancy(*FindDevice("a100"), 32, 0, 16);
  EXPECT_EQ(o.ctas_per_sm, 32);
  EXPECT_EQ(o.limit, "ctas");
}

}  // namespace
}  // namespace ptxserve::cost
