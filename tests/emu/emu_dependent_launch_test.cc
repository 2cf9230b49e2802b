// Programmatic dependent launch (griddepcontrol): results are those of launches in stream
// order, and what would race on a GPU -- reading, before griddepcontrol.wait, memory that a
// kernel which may still run wrote, or writing global memory before the wait -- is an error.
#include <numeric>

#include "gmock/gmock.h"
#include "tests/emu/emu_test_util.h"

namespace ptxserve::emu::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kN = 64;

struct Buffers {
  uint64_t w, x, y, z;
};

Buffers Make(Emulator& emu) {
  std::vector<uint32_t> w(kN);
  std::iota(w.begin(), w.end(), 100);
  return {Upload(emu, w), *emu.Alloc(kN * 4), *emu.Alloc(kN * 4), *emu.Alloc(kN * 4)};
}

absl::Status LaunchEntry(Emulator& emu, const std::string& entry, std::vector<KernelArg> args) {
  return emu.Launch(Load(emu, "grid_dependency", entry), {1, 1, 1}, {kN, 1, 1}, 0, args);
}

TEST(DependentLaunch, ReadsAfterTheWaitSeeThePreviousKernel) {
  Emulator emu;
  const Buffers b = Make(emu);
  ASSERT_TRUE(LaunchEntry(emu, "produce", {Ptr(b.x)}).ok());
  const absl::Status st = LaunchEntry(emu, "consume_late", {Ptr(b.w), Ptr(b.x), Ptr(b.y)});
  ASSERT_TRUE(st.ok()) << st;
  const auto y = Download<uint32_t>(emu, b.y, kN);
  for (uint32_t i = 0; i < kN; ++i) ASSERT_EQ(y[i], 100 + i + i + 1) << i;
}

TEST(DependentLaunch, ReadBeforeTheWaitOfWhatThePreviousKernelWroteIsARace) {
  Emulator emu;
  const Buffers b = Make(emu);
  ASSERT_TRUE(LaunchEntry(emu, "produce", {Ptr(b.x)}).ok());
  const absl::Status st = LaunchEntry(emu, "consume_early", {Ptr(b.w), Ptr(b.x), Ptr(b.y)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("dependent-launch race"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("before griddepcontrol.wait"));
  EXPECT_THAT(std::string(st.message()),
              HasSubstr(Line(LineOf("grid_dependency", "ld.global.u32", "consume_early"))));
}

TEST(DependentLaunch, AKernelThatDoesNotTriggerCompletesFirst) {
  // The dependent launches only when the previous kernel completes (no trigger), and a copy
  // orders the stream fully: the early read is safe after either.
  Emulator emu;
  const Buffers b = Make(emu);
  const FunctionHandle add = Load(emu, "vector_add");
  ASSERT_TRUE(
      emu.Launch(add, {1, 1, 1}, {kN, 1, 1}, 0, {Ptr(b.w), Ptr(b.w), Ptr(b.x), U32(kN)}).ok());
  EXPECT_TRUE(LaunchEntry(emu, "consume_early", {Ptr(b.w), Ptr(b.x), Ptr(b.y)}).ok());
  ASSERT_TRUE(LaunchEntry(emu, "produce", {Ptr(b.x)}).ok());
  ASSERT_TRUE(emu.CopyDtoD(b.z, b.w, kN * 4).ok());
  EXPECT_TRUE(LaunchEntry(emu, "consume_early", {Ptr(b.w), Ptr(b.x), Ptr(b.y)}).ok());
}

TEST(DependentLaunch, AKernelThatTriggersBeforeItsWaitLetsOlderWritesRace) {
  // consume_late triggers before its wait, so the kernel after it may start while produce
  // still runs: reading produce's x early is a race two launches later.
  Emulator emu;
  const Buffers b = Make(emu);
  ASSERT_TRUE(LaunchEntry(emu, "produce", {Ptr(b.x)}).ok());
  ASSERT_TRUE(LaunchEntry(emu, "consume_late", {Ptr(b.w), Ptr(b.z), Ptr(b.y)}).ok());
  const absl::Status st = LaunchEntry(emu, "consume_early", {Ptr(b.w), Ptr(b.x), Ptr(b.z)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("dependent-launch race"));
}

TEST(DependentLaunch, WriteBeforeTheWaitIsARace) {
  Emulator emu;
  const Buffers b = Make(emu);
  const absl::Status st = LaunchEntry(emu, "store_early", {Ptr(b.y)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("global write"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("before griddepcontrol.wait"));
}

}  // namespace
}  // namespace ptxserve::emu::testing
