// The cost model on real counters: the decode GEMV (batch 1, f16 weights) at the shape of
// a Llama-3.2-1B attention projection (2048 x 2048), run by the emulator. Its estimate on
// each device is bound by DRAM, no faster than the weights' bytes at the datasheet
// bandwidth, and printed with its share of that roofline. The figures are estimates.
#include <cstring>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/cost/cost_model.h"
#include "kernels/gemm.h"
#include "tests/kernels/emu_harness.h"

namespace ptxserve::kernels::testing {
namespace {

TEST(CostEstimate, DecodeGemvAtALlamaProjectionIsBoundByItsWeightBytes) {
  constexpr int kM = 1, kN = 2048, kK = 2048;
  GemmConfig base;
  base.n = kN;
  base.k = kK;
  base.weight_dtype = ElemType::kF16;
  const GemmConfig cfg = GemmConfigFor(base, kM);
  ASSERT_FALSE(cfg.tiled);
  absl::StatusOr<std::string> ptx = GenerateGemm(cfg);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  emu::EmulatorOptions options;
  options.collect_counters = true;
  EmuHarness h(options);
  const uint16_t one_f16 = 0x3c00;
  std::vector<uint8_t> w(static_cast<size_t>(kN) * kK * 2);
  for (size_t i = 0; i < w.size(); i += 2) std::memcpy(&w[i], &one_f16, 2);
  const uint64_t dx = h.Upload(std::vector<float>(kM * kK, 1.0f));
  const uint64_t dw = h.Upload(w), dy = h.Alloc(kM * kN * 4);
  ASSERT_TRUE(
      h.Run(*ptx, kGemmEntry, GemmLaunch(cfg, kM), {Ptr(dx), Ptr(dw), Ptr(0), Ptr(dy), U32(kM)})
          .ok());
  std::vector<emu::KernelCounters> counters = h.emu().TakeCounters();
  ASSERT_EQ(counters.size(), 1u);
  const emu::KernelCounters& c = counters[0];

  for (const std::string& name : cost::DeviceNames()) {
    SCOPED_TRACE(name);
    const cost::DeviceSpec& d = *cost::FindDevice(name);
    const cost::Estimate e = cost::EstimateLaunch(d, c, {}, /*in_graph=*/true);
    const double roofline = static_cast<double>(w.size()) / d.dram_bytes_per_s;
    EXPECT_EQ(e.binding, "dram");
    EXPECT_GE(e.seconds, roofline);
    absl::PrintF(
        "estimate (not measured): gemv 1x2048x2048 f16 on %s: %.2f us, bound by %s (dram %.2f, "
        "latency %.2f, issue %.2f us), %d CTAs/SM (%s), %.0f GB/s drawn; roofline %.2f us "
        "= %.0f%%\n",
        d.description, e.seconds * 1e6, e.binding, e.dram_s * 1e6, e.latency_s * 1e6,
        e.issue_s * 1e6, e.occupancy.ctas_per_sm, e.occupancy.limit, e.dram_bandwidth / 1e9,
        roofline * 1e6, 100 * roofline / e.seconds);
  }
}

}  // namespace
}  // namespace ptxserve::kernels::testing
