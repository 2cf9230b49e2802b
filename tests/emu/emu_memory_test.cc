// The driver-like memory interface: device addresses, bounds-checked copies, memsets,
// use after free, and 128-bit vector loads/stores in kernels.
#include <gmock/gmock.h>

#include "tests/emu/emu_test_util.h"

namespace ptxserve::emu::testing {
namespace {

using ::testing::HasSubstr;

TEST(EmuMemory, DeviceAddressesAreDistinctFromHostAndGuarded) {
  Emulator emu;
  const uint64_t a = *emu.Alloc(1000), b = *emu.Alloc(10);
  EXPECT_GE(a, 0x100000000ull);
  EXPECT_EQ(a % 256, 0u);
  EXPECT_EQ(b % 256, 0u);
  EXPECT_GE(b, a + 1000 + 4096);  // a guard gap separates allocations
  EXPECT_FALSE(emu.Alloc(0).ok());
  uint64_t used, total;
  emu.MemInfo(&used, &total);
  EXPECT_EQ(used, 1010u);
  ASSERT_TRUE(emu.Free(a).ok());
  EXPECT_FALSE(emu.Free(a).ok());      // double free
  EXPECT_FALSE(emu.Free(b + 4).ok());  // not a base address
  const uint64_t c = *emu.Alloc(1000);
  EXPECT_GT(c, b);  // addresses are never reused
}

TEST(EmuMemory, CopiesAreBoundsChecked) {
  Emulator emu;
  const uint64_t d = *emu.Alloc(64);
  std::vector<uint8_t> host(128, 7);
  EXPECT_TRUE(emu.CopyHtoD(d, host.data(), 64).ok());
  absl::Status st = emu.CopyHtoD(d + 8, host.data(), 64);
  EXPECT_THAT(st.message(), HasSubstr("overruns the allocation"));
  st = emu.CopyDtoH(host.data(), d + 4096, 4);
  EXPECT_THAT(st.message(), HasSubstr("not inside a live allocation"));
  st = emu.CopyDtoH(host.data(), 0x1234, 4);
  EXPECT_FALSE(st.ok());
  const uint64_t e = *emu.Alloc(64);
  ASSERT_TRUE(emu.Memset(e, 0x5a, 64).ok());
  ASSERT_TRUE(emu.CopyDtoD(d + 16, e, 16).ok());
  auto v = Download<uint8_t>(emu, d, 64);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(v[i], (i >= 16 && i < 32) ? 0x5a : 7) << i;
  ASSERT_TRUE(emu.MemsetD32(e, 0x01020304u, 16).ok());
  for (uint32_t w : Download<uint32_t>(emu, e, 16)) EXPECT_EQ(w, 0x01020304u);
  EXPECT_FALSE(emu.MemsetD32(e + 2, 0, 1).ok());
  EXPECT_FALSE(emu.Memset(e, 0, 65).ok());
  const EmulatorStats s = emu.stats();
  EXPECT_EQ(s.bytes_htod, 64u);
  EXPECT_EQ(s.bytes_dtod, 16u);
}

TEST(EmuMemory, NewAllocationsArePoisoned) {
  Emulator emu;
  const uint64_t d = *emu.Alloc(16);
  for (uint8_t b : Download<uint8_t>(emu, d, 16)) EXPECT_EQ(b, 0xff);
}

TEST(EmuMemory, KernelUseAfterFreeIsAnError) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "vector_add");
  const uint64_t a = *emu.Alloc(256), b = *emu.Alloc(256), c = *emu.Alloc(256);
  ASSERT_TRUE(emu.Free(b).ok());
  const absl::Status st =
      emu.Launch(f, {1, 1, 1}, {64, 1, 1}, 0, {Ptr(a), Ptr(b), Ptr(c), U32(64)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("no allocation contains it"));
}

TEST(EmuMemory, Vector128BitLoadsAndStores) {
  Emulator emu;
  const uint32_t n4 = 37;  // threads; the second half of each buffer holds the u64/b16 test
  std::vector<float> in(n4 * 8);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) + 0.25f;
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(in.size() * 4);
  ASSERT_TRUE(
      emu.Launch(Load(emu, "vec4"), {1, 1, 1}, {64, 1, 1}, 0, {Ptr(din), Ptr(out), U32(n4)}).ok());
  const auto v = Download<float>(emu, out, in.size());
  for (uint32_t i = 0; i < n4 * 4; ++i) EXPECT_EQ(v[i], 2 * in[i]) << i;
  const auto raw_in = Download<uint64_t>(emu, din, in.size() / 2);
  const auto raw_out = Download<uint64_t>(emu, out, in.size() / 2);
  const auto h_in = Download<uint16_t>(emu, din, in.size() * 2);
  const auto h_out = Download<uint16_t>(emu, out, in.size() * 2);
  for (uint32_t t = 0; t < n4; ++t) {
    const size_t q = n4 * 2 + 2 * t;  // u64 index of this thread's 16 bytes in the 2nd half
    EXPECT_EQ(raw_out[q], raw_in[q + 1]) << t;  // {rd10, rd9} swapped...
    // ...then the b16 store overwrites the second u64 with the first 8 bytes reversed.
    for (int k = 0; k < 4; ++k) EXPECT_EQ(h_out[4 * (q + 1) + k], h_in[4 * q + 3 - k]) << t;
  }
}

}  // namespace
}  // namespace ptxserve::emu::testing

namespace ptxserve::emu::testing {
namespace {

TEST(EmuMemory, PerThreadLocalMemory) {
  Emulator emu;
  const uint32_t n = 40;
  std::vector<uint32_t> in(n);
  for (uint32_t i = 0; i < n; ++i) in[i] = (i * 37 + 11) & 0xff;
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(n * 8);
  ASSERT_TRUE(
      emu.Launch(Load(emu, "local", "local_array"), {1, 1, 1}, {n, 1, 1}, 0, {Ptr(din), Ptr(out)})
          .ok());
  const auto v = Download<uint32_t>(emu, out, 2 * n);
  for (uint32_t i = 0; i < n; ++i) {
    EXPECT_EQ(v[2 * i], 100 * i + (in[i] & 15)) << i;
    EXPECT_EQ(v[2 * i + 1], 100 * i + ((in[i] >> 4) & 15)) << i;
  }
  const absl::Status st =
      emu.Launch(Load(emu, "local", "local_overflow"), {1, 1, 1}, {32, 1, 1}, 0, {Ptr(out)});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("thread (8,0,0)"), std::string::npos) << st;
  EXPECT_NE(st.message().find("out-of-bounds local store"), std::string::npos) << st;
}

}  // namespace
}  // namespace ptxserve::emu::testing
