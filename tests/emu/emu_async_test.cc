// cp.async as the ISA defines it: the data lands only when the issuing thread waits for
// the copy's group, wait_group N leaves exactly the N newest groups pending, src-size and
// ignore-src zero-fill; and the misuses that pass on a CPU but race on a GPU (reading or
// overwriting a destination before its wait, copying onto a copy in flight, exiting with
// copies in flight) are reported with kernel, block, thread and PTX line.
#include <gmock/gmock.h>

#include "tests/emu/emu_test_util.h"

namespace ptxserve::emu::testing {
namespace {

using ::testing::HasSubstr;

TEST(EmuAsync, PipelineWaitGroupOneLandsExactlyTheOlderTile) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "cp_async", "cp_async_pipeline");
  const uint32_t threads = 64, tiles = 5;
  std::vector<float> in(tiles * threads * 4);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(in.size() * 4);
  const absl::Status st =
      emu.Launch(f, {1, 1, 1}, {threads, 1, 1}, 0, {Ptr(din), Ptr(out), U32(tiles)});
  ASSERT_TRUE(st.ok()) << st;
  const auto v = Download<float>(emu, out, in.size());
  for (uint32_t t = 0; t < tiles; ++t) {
    for (uint32_t i = 0; i < threads; ++i) {
      for (uint32_t k = 0; k < 4; ++k) {
        ASSERT_EQ(v[(t * threads + i) * 4 + k], in[(t * threads + (i + 1) % threads) * 4 + k])
            << "tile " << t << " thread " << i;
      }
    }
  }
}

TEST(EmuAsync, CopySizesSrcSizeAndIgnoreSrcZeroFill) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "cp_async", "cp_async_sizes");
  const uint32_t threads = 40;
  std::vector<uint32_t> in(threads * 4);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 0x11223344u + static_cast<uint32_t>(i);
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(in.size() * 4);
  ASSERT_TRUE(emu.Launch(f, {1, 1, 1}, {threads, 1, 1}, 0, {Ptr(din), Ptr(out)}).ok());
  const auto v = Download<uint32_t>(emu, out, in.size());
  for (uint32_t i = 0; i < threads; ++i) {
    EXPECT_EQ(v[4 * i], in[4 * i]) << i;                     // 4 bytes
    EXPECT_EQ(v[4 * i + 1], in[4 * i + 1] & 0xffu) << i;     // src-size 1 of 4
    const bool odd = i % 2 == 1;                             // ignore-src on odd threads
    EXPECT_EQ(v[4 * i + 2], odd ? 0u : in[4 * i + 2]) << i;  // 8 bytes
    EXPECT_EQ(v[4 * i + 3], odd ? 0u : in[4 * i + 3]) << i;
  }
}

absl::Status RunHazard(Emulator& emu, uint32_t mode, std::vector<uint32_t>* out_words = nullptr) {
  const uint32_t threads = 64;
  std::vector<uint32_t> in(threads * 4);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint32_t>(i);
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(threads * 4);
  const absl::Status st = emu.Launch(Load(emu, "cp_async", "cp_async_hazards"), {2, 1, 1},
                                     {threads, 1, 1}, 0, {Ptr(din), Ptr(out), U32(mode)});
  if (out_words != nullptr) *out_words = Download<uint32_t>(emu, out, threads);
  return st;
}

// "PTX line <n>" of `needle` in cp_async_hazards.
std::string HazardLine(const std::string& needle) {
  return Line(LineOf("cp_async", needle, "cp_async_hazards("));
}
const char* kStage = "cp.async.cg.shared.global [%r7]";

TEST(EmuAsync, CorrectWaitAndBarrierPass) {
  Emulator emu;
  std::vector<uint32_t> v;
  const absl::Status st = RunHazard(emu, 4, &v);
  ASSERT_TRUE(st.ok()) << st;
  for (uint32_t i = 0; i + 1 < 64; ++i) EXPECT_EQ(v[i], 4 * (i + 1)) << i;
}

// Shared memory holds scratch (first used) at 0 and stage at 0x400. After the barrier the
// warp that released it runs on first: thread 32 reads stage[33], thread 33's copy.
TEST(EmuAsync, ReadBeforeAnyWaitIsReported) {
  Emulator emu;
  const absl::Status st = RunHazard(emu, 0);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("kernel cp_async_hazards: block (0,0,0), thread (32,0,0), " +
                                      HazardLine("ld.shared.u32 %r8")));
  EXPECT_THAT(st.message(),
              HasSubstr("reads shared address 0x610, the destination of a cp.async by thread "
                        "(33,0,0) at " +
                        HazardLine(kStage)));
  EXPECT_THAT(st.message(), HasSubstr("has not landed"));
}

TEST(EmuAsync, WaitingForTooFewGroupsIsReported) {
  Emulator emu;
  const absl::Status st = RunHazard(emu, 1);  // wait_group 1 lands the scratch group only
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr(HazardLine("ld.shared.u32 %r8")));
  EXPECT_THAT(st.message(), HasSubstr("cp.async by thread (33,0,0) at " + HazardLine(kStage)));
}

TEST(EmuAsync, OverwritingADestinationBeforeItsWaitIsReported) {
  Emulator emu;
  const absl::Status st = RunHazard(emu, 2);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("thread (0,0,0), " + HazardLine("@%p2 st.shared.u32 [%r7]")));
  EXPECT_THAT(st.message(), HasSubstr("this thread writes shared address 0x400, the destination "
                                      "of a cp.async by thread (0,0,0)"));
}

TEST(EmuAsync, CopyOntoACopyInFlightIsReported) {
  Emulator emu;
  const absl::Status st = RunHazard(emu, 5);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr(HazardLine("@%p5 cp.async.ca.shared.global [%r7+8]")));
  EXPECT_THAT(st.message(), HasSubstr("starts a cp.async onto shared address 0x408"));
}

// Landed data is a write of the issuing warp at its wait: other warps still need the
// barrier. Warp 0 runs to its end first and reads stage[32] before warp 1 even issues that
// copy, so the race shows at warp 1's cp.async.
TEST(EmuAsync, WaitWithoutBarrierRacesWithOtherWarps) {
  Emulator emu;
  const absl::Status st = RunHazard(emu, 6);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("thread (32,0,0), " + HazardLine(kStage)));
  EXPECT_THAT(st.message(), HasSubstr("shared-memory race: warp 1 writes shared address 0x600, "
                                      "which warp 0 read at " +
                                      HazardLine("ld.shared.u32 %r8")));
}

TEST(EmuAsync, ExitWithCopiesInFlightIsReported) {
  Emulator emu;
  const absl::Status st = RunHazard(emu, 3);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("block (0,0,0), thread (0,0,0), " + HazardLine("@%p3 exit")));
  EXPECT_THAT(st.message(), HasSubstr("exits with 2 cp.async copies in flight (the first from " +
                                      HazardLine("cp.async.cg.shared.global [%r5]")));
}

// ret and the end of the kernel are exits too.
TEST(EmuAsync, ReturnWithCopiesInFlightIsReported) {
  const std::string ptx = R"(.version 7.8
.target sm_80
.address_size 64
.visible .entry fire_and_forget(.param .u64 in)
{
    .shared .align 16 .b8 stage[16];
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [in];
    cp.async.ca.shared.global [stage], [%rd1], 16;
    cp.async.commit_group;
    ret;
}
)";
  Emulator emu;
  auto m = emu.LoadModule(ptx);
  ASSERT_TRUE(m.ok()) << m.status();
  const uint64_t in = *emu.Alloc(16);
  const absl::Status st =
      emu.Launch(*emu.GetFunction(*m, "fire_and_forget"), {1, 1, 1}, {1, 1, 1}, 0, {Ptr(in)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("kernel fire_and_forget: block (0,0,0), thread (0,0,0), "
                                      "PTX line 11: thread exits with 1 cp.async copy in flight "
                                      "(the first from PTX line 9"));
}

}  // namespace
}  // namespace ptxserve::emu::testing
